"""The CPU engine's op table (`OP_FUNCTIONS`) and its geometric ops on HWC uint8 images; the
colour ones are in `photometric`."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

import numpy as np
import torch
import torch.nn.functional as F

from hybridload._compat import torch_resize_aa
from hybridload.recipe._custom import CustomOp, SampleOp, apply_custom
from hybridload.recipe._ops import Crop, Flip, Op, Resize

from hybridload._kernels.photometric import PHOTO_FUNCTIONS, apply_photometric
from hybridload._kernels.scratch import MAX_POOLED_PIXELS

if TYPE_CHECKING:
    from hybridload.recipe import Recipe


def crop(img: torch.Tensor, op: Crop) -> torch.Tensor:
    """Integer crop of an HWC tensor; parts outside the image read as zeros."""
    x, y, w, h = op.x, op.y, op.w, op.h
    H, W = img.shape[0], img.shape[1]
    if x >= 0 and y >= 0 and x + w <= W and y + h <= H:
        return img[y : y + h, x : x + w]
    out = img.new_zeros((h, w, img.shape[2]))
    sx0, sy0 = max(x, 0), max(y, 0)
    sx1, sy1 = min(x + w, W), min(y + h, H)
    if sx1 > sx0 and sy1 > sy0:
        out[sy0 - y : sy1 - y, sx0 - x : sx1 - x] = img[sy0:sy1, sx0:sx1]
    return out


def resize(img: torch.Tensor, op: Resize) -> torch.Tensor:
    """Antialiased bilinear resize of an HWC uint8 tensor, within one level of Pillow's BILINEAR.

    ``unsqueeze`` before ``permute`` keeps the view channels-last to torch's layout guess; the
    other order costs a planar repack, a third of the resize on a 300 px crop (CONTRIBUTING.md)."""
    h, w = op.h, op.w
    if img.shape[0] == h and img.shape[1] == w:
        return img
    nchw = img.unsqueeze(0).permute(0, 3, 1, 2)  # a channels-last view, no copy
    out = F.interpolate(nchw, size=(h, w), mode="bilinear", antialias=True, align_corners=False)
    return out[0].permute(1, 2, 0)


class _Kept(threading.local):
    """This thread's resize target of one size: the HWC array and its NCHW channels-last torch
    view, made once (a tensor view costs a few microseconds a sample, ~1% of the kernel)."""

    def __init__(self) -> None:
        self.hw: tuple[int, int] | None = None
        self.array = np.empty((0, 0, 3), np.uint8)
        self.nchw = torch.empty(0, dtype=torch.uint8)


_KEPT = _Kept()


def resize_kept(src: np.ndarray, op: Resize) -> np.ndarray:
    """`resize` of an HWC uint8 array (a view of any strides) into this thread's kept HWC array
    of the op's size: the same pixels, no allocation; the array is overwritten by this thread's
    next call, so it is read before then. ``src`` itself where it already has the size; a fresh
    array above `MAX_POOLED_PIXELS` output pixels."""
    h, w = op.h, op.w
    if src.shape[0] == h and src.shape[1] == w:
        return src
    kept = _KEPT
    if kept.hw == (h, w):
        array, nchw = kept.array, kept.nchw
    else:
        array = np.empty((h, w, 3), np.uint8)
        nchw = torch.from_numpy(array).unsqueeze(0).permute(0, 3, 1, 2)
        if h * w <= MAX_POOLED_PIXELS:  # a larger one is not kept: bounds what a thread holds
            kept.hw, kept.array, kept.nchw = (h, w), array, nchw
    _resize_aa()(torch.from_numpy(src).unsqueeze(0).permute(0, 3, 1, 2), (h, w), False, None, None, out=nchw)
    return array


def _resize_aa() -> Callable[..., torch.Tensor]:
    global _RESIZE_AA
    if _RESIZE_AA is None:
        _RESIZE_AA = torch_resize_aa()
    return _RESIZE_AA


_RESIZE_AA: Callable[..., torch.Tensor] | None = None


def flip(img: torch.Tensor, op: Flip) -> torch.Tensor:
    """Left-right mirror of an HWC tensor."""
    return img.flip(1)


#: The CPU engine's kernel of each op type; `CustomOp` runs here only (not ``gpu_capable``).
OP_FUNCTIONS: dict[type, Callable[[torch.Tensor, Any], torch.Tensor]] = {
    Crop: crop,
    Resize: resize,
    Flip: flip,
    **PHOTO_FUNCTIONS,
    CustomOp: apply_custom,
}
#: Op types the CPU engine does not run, and why: none (it is every recipe's reference).
UNSUPPORTED: dict[type, str] = {}


def apply_ops(
    arr: np.ndarray | torch.Tensor, ops: Sequence[SampleOp], stages: Sequence[str] | None = None
) -> torch.Tensor:
    """Apply ``ops`` (see SampleParams) in order; returns an HWC uint8 tensor (maybe a view).

    On failure the exception carries the failing stage's name in ``stage``.
    """
    if isinstance(arr, np.ndarray):
        if not arr.flags.writeable:  # e.g. np.asarray(PIL image); torch wants writable memory
            arr = arr.copy()
        img = torch.from_numpy(arr)
    else:
        img = arr
    k = 0
    while k < len(ops):
        op, end = ops[k], k + 1
        try:
            if type(op) in PHOTO_FUNCTIONS:  # a run of colour ops: one float32 round trip
                while end < len(ops) and type(ops[end]) in PHOTO_FUNCTIONS:
                    end += 1
                img = apply_photometric(img, cast("Sequence[Op]", ops[k:end]))  # photometric ops, checked above
            else:
                fn = OP_FUNCTIONS.get(type(op))
                if fn is None:
                    raise ValueError(
                        f"unknown operation {op!r}; the kernels know {', '.join(t.__name__ for t in OP_FUNCTIONS)}"
                    )
                img = fn(img, op)
        except Exception as exc:
            exc.stage = stages[k] if stages else type(op).__name__  # type: ignore[attr-defined]
            raise
        k = end
    return img


def compile(rec: Recipe) -> Callable[..., torch.Tensor]:
    """`apply_ops` as ``rec``'s pipeline once every op its stages emit has a kernel here;
    ValueError naming the stage and the op otherwise."""
    if (why := rec.cannot_run("CPU", OP_FUNCTIONS, UNSUPPORTED)) is not None:
        raise ValueError(why)
    return apply_ops
