"""Decode a JPEG at 1/2, 1/4 or 1/8 where the recipe shrinks the crop that much, a pure function
of size and ops so every CPU lane chooses alike (the trade and its figures:
docs/guide/recipes.md, ``dct_scaling``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, cast

from hybridload.recipe._custom import SampleOp
from hybridload.recipe._ops import Crop, Resize

#: The scale denominators tried, largest reduction first (libjpeg-turbo's SIMD IDCT sizes).
DENOMINATORS = (8, 4, 2)
#: The decoded crop keeps at least this many pixels per output pixel on each side, unless the
#: recipe says otherwise (``Decode(reducing_gap=...)``): 2 as Pillow's ``reducing_gap`` default.
MARGIN = 2


@dataclass(frozen=True)
class ScaledDecode:
    """A DCT-scaled decode of one sample.

    Attributes:
        denominator: the image is decoded at 1/denominator of its size (2, 4 or 8).
        min_width: the decoded width libjpeg-turbo must reach (``ceil(width / denominator)``).
        min_height: the decoded height likewise.
    """

    denominator: int
    min_width: int
    min_height: int


def scaled_size(width: int, height: int, denominator: int) -> tuple[int, int]:
    """The size libjpeg-turbo decodes a ``width`` x ``height`` JPEG to at 1/``denominator``
    (``TJSCALED``: each side rounded up)."""
    return -(-width // denominator), -(-height // denominator)


def plan_scaled_decode(width: int, height: int, ops: Sequence[SampleOp], gap: float = MARGIN) -> ScaledDecode | None:
    """The largest 1/d leaving the leading Crop at least ``gap`` times the Resize's output on
    both sides, so the resize after it still shrinks; None where the full decode must run."""
    if len(ops) < 2 or type(ops[0]) is not Crop or type(ops[1]) is not Resize:
        return None
    crop, out = ops[0], ops[1]
    if crop.x < 0 or crop.y < 0 or crop.x + crop.w > width or crop.y + crop.h > height:
        return None
    for d in DENOMINATORS:
        if crop.w // d >= gap * out.w and crop.h // d >= gap * out.h:
            return ScaledDecode(d, *scaled_size(width, height, d))
    return None


def scaled_ops(ops: Sequence[SampleOp], denominator: int, scaled_w: int, scaled_h: int) -> tuple[SampleOp, ...]:
    """``ops`` with the leading Crop mapped onto the 1/``denominator`` image: decoded pixel k
    covers full pixels ``[k * d, (k + 1) * d)``, so x maps to x / d, rounded and kept inside."""
    crop, d = cast(Crop, ops[0]), denominator  # planned by plan_scaled_decode: a Crop leads
    x0, y0 = round(crop.x / d), round(crop.y / d)
    x1 = min(scaled_w, max(x0 + 1, round((crop.x + crop.w) / d)))
    y1 = min(scaled_h, max(y0 + 1, round((crop.y + crop.h) / d)))
    return (Crop(x0, y0, x1 - x0, y1 - y0), *ops[1:])
