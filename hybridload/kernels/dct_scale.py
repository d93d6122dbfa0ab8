"""Decode a JPEG at 1/2, 1/4 or 1/8 of its size where the recipe shrinks the crop at least that much.

libjpeg-turbo can scale in the DCT domain: it computes the smaller image from fewer DCT
coefficients, which skips most of the inverse DCT, the chroma upsampling and the colour
conversion of the full-size image. When a sample's first ops are ``Crop`` then ``Resize`` and
the crop is at least twice the output on both sides (RandomResizedCrop on a phone photo, say),
decoding at the largest power-of-two factor that keeps at least ``MARGIN`` decoded pixels per
output pixel on each side — then cropping the mapped box and resizing it, still downscaling —
gives nearly the same pixels for a fraction of the work (the box's corners are rounded to
whole decoded pixels; the margin keeps that shift under half an output pixel). Anything else keeps the full decode.

The plan is a pure function of the image size and the sample's ops, so every CPU lane makes
the same choice for the same sample and the lanes stay bit-identical to each other.
``Decode(dct_scaling=True)`` turns it on; the default keeps the full decode (the GPU engines
decode fully, and their stated tolerance against the CPU lanes holds only then).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, cast

from hybridload.recipe.custom import SampleOp
from hybridload.recipe.ops import Crop, Resize

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
    """The scaled decode for an image of ``width`` x ``height`` whose ops start with Crop and
    Resize, or None where the full decode must run (no such ops, a crop reaching outside the
    image, or a crop too small to keep the margin even at half size).

    The factor is the largest 1/d that leaves the crop at least ``gap`` (``MARGIN`` by default)
    times the output on both sides, so the resize after it always shrinks (with ``gap`` 1.0,
    the mapped crop still covers the output: `scaled_ops` rounds both corners alike).
    """
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
    """``ops`` with the leading Crop mapped onto the image decoded at 1/``denominator``
    (``scaled_w`` x ``scaled_h``): libjpeg-turbo's decoded pixel k covers the full image's
    pixels ``[k * d, (k + 1) * d)``, so a full-size coordinate x maps to x / d; the corners
    are rounded to whole pixels and kept inside the decoded image."""
    crop, d = cast(Crop, ops[0]), denominator  # planned by plan_scaled_decode: a Crop leads
    x0, y0 = round(crop.x / d), round(crop.y / d)
    x1 = min(scaled_w, max(x0 + 1, round((crop.x + crop.w) / d)))
    y1 = min(scaled_h, max(y0 + 1, round((crop.y + crop.h) / d)))
    return (Crop(x0, y0, x1 - x0, y1 - y0), *ops[1:])
