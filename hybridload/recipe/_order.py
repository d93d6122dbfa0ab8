"""Each stage class's phase and the order rules a `Recipe` checks (phases never go back; the
output size fixed, so samples stack): one table, so a new stage needs only its row."""

from __future__ import annotations

from enum import IntEnum
from typing import Sequence

from hybridload.recipe._autoaug import TrivialAugmentWide
from hybridload.recipe._custom import CustomStage
from hybridload.recipe._photometric import PHOTOMETRIC_STAGES, RandomErasing
from hybridload.recipe._stages import (
    GEOMETRY,
    CenterCrop,
    Decode,
    Normalize,
    RandomResizedCrop,
    Resize,
    ToTensor,
    size_hw,
)

#: Stages that compile, per sample, into ops (geometric first, then photometric).
PER_SAMPLE = GEOMETRY + PHOTOMETRIC_STAGES + (TrivialAugmentWide,)


class Phase(IntEnum):
    """Where a stage may stand in a recipe: phases never go back, and the last three hold one
    stage each."""

    DECODE = 0
    GEOMETRY = 1  # crops, resizes, flips, in any order
    PHOTOMETRIC = 2  # colour stages, after the geometry
    NORMALIZE = 3
    ERASE = 4  # RandomErasing works on the normalized image
    LAYOUT = 5  # ToTensor


#: the phases that hold at most one stage
SINGLE = (Phase.NORMALIZE, Phase.ERASE, Phase.LAYOUT)


def phase_of(kind: type) -> Phase | None:
    """Pure: a stage class's phase, or None for what is not a recipe stage (CustomStage keeps
    the phase where it was and is checked on its own)."""
    if kind is Decode:
        return Phase.DECODE
    if issubclass(kind, GEOMETRY):
        return Phase.GEOMETRY
    if issubclass(kind, PER_SAMPLE):
        return Phase.PHOTOMETRIC
    return {Normalize: Phase.NORMALIZE, RandomErasing: Phase.ERASE, ToTensor: Phase.LAYOUT}.get(kind)


NOT_FIXED = (
    "Recipe: the output size is not fixed; end the geometric stages with "
    "RandomResizedCrop, CenterCrop or Resize((height, width)) so samples stack into batches"
)


def fixed_hw(stages: Sequence[object]) -> tuple[int, int] | None:
    """Pure: (height, width) the last geometric stage that fixes one sets; None if none does."""
    hw = None
    for st in stages:
        if isinstance(st, (RandomResizedCrop, CenterCrop)):
            hw = size_hw(st.size)
        elif isinstance(st, Resize):
            hw = st.size if isinstance(st.size, tuple) else None
    return hw


def check_order(stages: Sequence[object]) -> None:
    """Raise ValueError, saying what to write, where ``stages`` break the order rules or leave
    the output size unfixed."""
    if not stages or not isinstance(stages[0], Decode):
        raise ValueError("Recipe: the first stage must be Decode(); add it at the front of the list")
    last = Phase.DECODE
    for i, st in enumerate(stages):
        kind = type(st)
        if kind is CustomStage:  # leaves the phase where it was: geometric/photometric stages may follow
            if last >= Phase.NORMALIZE:
                raise ValueError(
                    f"Recipe: CustomStage at position {i} comes after Normalize; it works on "
                    "the decoded uint8 image, so put it before Normalize()"
                )
            continue
        phase = phase_of(kind)
        if phase is None:
            raise ValueError(f"Recipe: stage {i} is {st!r}, not a hybridload.recipe stage")
        if i > 0 and kind is Decode:
            raise ValueError("Recipe: Decode may appear only once, as the first stage")
        if phase < last or (phase in SINGLE and phase == last):
            raise ValueError(
                f"Recipe: {kind.__name__} at position {i} is out of order; the order is "
                "Decode, geometric stages, photometric stages, Normalize, RandomErasing, ToTensor "
                "(each of the last three at most once)"
            )
        if kind is RandomErasing and last != Phase.NORMALIZE:
            raise ValueError(
                "Recipe: RandomErasing works on the normalized image, as in torchvision; "
                "put Normalize() right before it"
            )
        last = phase
    if fixed_hw(stages) is None:
        raise ValueError(NOT_FIXED)
