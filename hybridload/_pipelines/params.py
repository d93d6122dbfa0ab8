"""Each sample's `SampleParams` as the arrays a fixed DALI chain takes (ROI decode, resize, slice,
mirror), pure and without DALI so it is tested anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybridload import recipe as R
from hybridload.recipe._ops import PHOTOMETRIC, Crop, Flip, Resize

from hybridload._pipelines.ops import UNSUPPORTED
from hybridload._pipelines.plan import Chain, DaliPlan, compile, photo_vectors


def chain_for(rec: R.Recipe) -> Chain:
    """The DALI chain of a recipe (`plan.compile`); ValueError when it does not fit."""
    return compile(rec).chain


@dataclass(frozen=True)
class ChainParams:
    """One sample's inputs to the chain (DALI's "WH" axis order for anchors and shapes)."""

    anchor1: np.ndarray  # float32 [x, y]
    shape1: np.ndarray  # float32 [w, h]
    size: np.ndarray  # float32 [h, w] (resize output, layout order)
    anchor2: np.ndarray  # float32 [x, y]
    shape2: np.ndarray  # float32 [w, h]
    flip: np.ndarray  # int32 scalar
    photo: tuple[np.ndarray, ...] = ()  # float32 vector per photometric stage, fed as "photo<j>"

    def __getattr__(self, name: str):
        """``photo<j>``: the j-th photometric stage's vector (the input's name in the pipeline)."""
        if name.startswith("photo") and name[5:].isdigit() and int(name[5:]) < len(self.photo):
            return self.photo[int(name[5:])]
        raise AttributeError(name)


def chain_params(params: R.SampleParams, width: int, height: int, plan: DaliPlan | None = None) -> ChainParams:
    """Map a sample's ops onto the chain: crop 1, resize, crop 2, flip (each may be identity),
    and its colour ops onto the ``plan``'s vectors (a sample with colour ops needs the plan)."""
    w, h = width, height
    c1 = (0, 0, w, h)
    size = None
    c2 = None
    flip = 0
    for op in params.ops:
        if isinstance(op, Crop):
            box = (op.x, op.y, op.w, op.h)
            if size is None and c2 is None and c1 == (0, 0, width, height):
                c1 = box
            else:
                c2 = box
            w, h = op.w, op.h
        elif isinstance(op, Resize):
            if size is not None or c2 is not None:
                raise ValueError(f"ops {params.ops} do not fit the chain crop, resize, crop, flip")
            size = (op.h, op.w)
            h, w = op.h, op.w
        elif isinstance(op, Flip):
            flip ^= 1
        elif isinstance(op, PHOTOMETRIC):
            continue  # after the geometry, in .photo
        else:
            why = UNSUPPORTED.get(type(op), "no function in hybridload/_pipelines/ops.py")
            raise ValueError(f"the DALI chain has no step for {op!r}: {why} (its tasks go to the CPU lanes)")
    x, y, cw, ch = c1
    if x < 0 or y < 0 or x + cw > width or y + ch > height:
        raise ValueError(f"the first crop {tuple(c1)} leaves the {width}x{height} image (ROI decoding cannot pad)")
    if size is None:
        size = (c1[3], c1[2])
    if c2 is None:
        c2 = (0, 0, size[1], size[0])
    f32 = np.float32
    return ChainParams(
        np.array(c1[:2], f32),
        np.array(c1[2:], f32),
        np.array(size, f32),
        np.array(c2[:2], f32),
        np.array(c2[2:], f32),
        np.array(flip, np.int32),
        _photo(params, plan),
    )


def _photo(params: R.SampleParams, plan: DaliPlan | None) -> tuple[np.ndarray, ...]:
    if plan is not None:
        return photo_vectors(plan, params.ops)
    if any(isinstance(op, PHOTOMETRIC) for op in params.ops):
        raise ValueError("a sample with colour ops maps onto the DALI graph through its recipe's plan (compile)")
    return ()
