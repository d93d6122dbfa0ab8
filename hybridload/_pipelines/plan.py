"""The DALI engine's compile, pure: a recipe's op slots into the chain's steps and one ``photo<j>``
input per colour stage, so a slot the table cannot run is a `ValueError` when the lane is built,
never a `KeyError` mid-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybridload import recipe as R
from hybridload.recipe._ops import PHOTOMETRIC, Crop, Flip, Resize, Slot

from hybridload._pipelines.ops import OP_FUNCTIONS, UINT8_OPS, UNSUPPORTED, VALUES

#: The chain's steps in order, with the op type each takes: a geometric slot takes the first
#: step after the last one taken whose type it holds.
STEPS = (("crop1", Crop), ("resize", Resize), ("crop2", Crop), ("flip", Flip))


@dataclass(frozen=True)
class Chain:
    """Which steps of the fixed chain a recipe uses."""

    crop1: bool
    resize: bool
    crop2: bool
    flip: bool


@dataclass(frozen=True)
class PhotoStage:
    """One stage's colour slots: the graph input ``photo<j>`` and the slots it feeds, in order."""

    stage: object
    slots: tuple[Slot, ...]

    def width(self) -> int:
        """The length of the stage's per-sample vector."""
        return sum(2 if len(s.types) > 1 else 1 for s in self.slots)


@dataclass(frozen=True)
class DaliPlan:
    """What `build_pipeline` builds: the chain's steps and the colour stages, in order."""

    chain: Chain
    photo: tuple[PhotoStage, ...]

    def photo_inputs(self) -> tuple[str, ...]:
        return tuple(f"photo{j}" for j in range(len(self.photo)))


def _why_not(st, op: type) -> str | None:
    if op in OP_FUNCTIONS and (op not in PHOTOMETRIC or op in VALUES):
        return None
    why = UNSUPPORTED.get(op) or "no function in hybridload/_pipelines/ops.py (OP_FUNCTIONS and VALUES)"
    return f"the DALI engine cannot run {op.__name__} of {st!r}: {why} (its tasks go to the CPU lanes)"


def compile(rec: R.Recipe) -> DaliPlan:
    """The plan of ``rec``'s DALI graph from its stages' op slots; `ValueError` naming the stage
    and the op when a slot has no function here or the geometry does not fit `STEPS`."""
    taken: dict[str, bool] = {name: False for name, _ in STEPS}
    at = 0
    photo: list[PhotoStage] = []
    for st, slots in rec.op_slots():
        colour = []
        for slot in slots:
            for op in slot.types:
                if (why := _why_not(st, op)) is not None:
                    raise ValueError(why)
            if all(op in PHOTOMETRIC for op in slot.types):
                if len(slot.types) > 1 and any(op in UINT8_OPS for op in slot.types):
                    raise ValueError(f"{st!r}: a drawn slot of the DALI graph takes float32 ops only")
                colour.append(slot)
                continue
            step = next((k for k in range(at, len(STEPS)) if slot.types == (STEPS[k][1],)), None)
            if step is None or colour or photo:
                raise ValueError(
                    f"the GPU lane runs recipes of the form [crop] [resize] [crop] [flip]; "
                    f"{rec.describe()} does not fit (its tasks go to the CPU lanes)"
                )
            taken[STEPS[step][0]], at = True, step + 1
        if colour:
            photo.append(PhotoStage(st, tuple(colour)))
    return DaliPlan(Chain(**taken), tuple(photo))


def photo_vectors(plan: DaliPlan, ops: tuple) -> tuple[np.ndarray, ...]:
    """One float32 vector per colour stage from a sample's colour ops: per slot its value, after
    the drawn type's index where the slot holds several."""
    colour = iter(op for op in ops if isinstance(op, PHOTOMETRIC))
    out = []
    for stage in plan.photo:
        v: list[float] = []
        for slot in stage.slots:
            op = next(colour, None)
            if op is None or type(op) not in slot.types:
                raise ValueError(f"{stage.stage!r} emitted {op!r}, not one of its slot's {slot.types}")
            if len(slot.types) > 1:
                v.append(float(slot.types.index(type(op))))
            v.append(float(VALUES[type(op)](op)))
        out.append(np.array(v, np.float32))
    if next(colour, None) is not None:
        raise ValueError("a sample has more colour ops than its recipe's stages declare (op_slots)")
    return tuple(out)
