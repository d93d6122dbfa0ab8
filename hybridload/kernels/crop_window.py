"""Decode only the sample's crop: the window of a JPEG its leading ``Crop`` keeps.

Where a sample's ops start with a ``Crop`` inside the image (RandomResizedCrop, CenterCrop,
RandomCrop without padding), libjpeg-turbo 3 decodes just that window (`turbo`),
widened by ``MARGIN`` pixels on each side so that chroma upsampling sees the same neighbours
as in the full image: the window's pixels are then bit-identical to the same crop of the full
decode (4:4:4, 4:2:2, 4:2:0, grey; baseline and progressive; tests/test_crop_window.py). With
``Decode(dct_scaling=True)`` the window is decoded at the DCT scale `dct_scale` plans,
the same pixels as the whole image decoded at that scale then cropped.

Everything else keeps the full decode: no leading crop, a crop reaching outside the image,
a non-JPEG, CMYK/YCCK, 12-bit or lossless JPEGs, a file not ending in the EOI marker
(truncated), a JPEG libjpeg-turbo refuses (the full decode then raises its named error), or
no ``turbojpeg`` wheel. Every JPEG has passed the structure check first (`jpeg_check`: a
frame declaring more than its data holds is refused whatever the window). One difference
remains: damage inside the entropy-coded data below the window of a baseline JPEG that
leaves that structure whole is never read, so it raises nothing where the full decode would
(as with DALI's and nvImageCodec's region decode); ``Decode(crop_window=False)`` checks every byte.
The choice is a pure function of the bytes and the sample's ops, so every CPU lane makes it
alike and stays bit-identical to the others.
"""

from __future__ import annotations

from typing import Sequence, cast

import numpy as np

from hybridload.recipe.custom import SampleOp
from hybridload.recipe.ops import Crop

from hybridload.kernels import turbo
from hybridload.kernels.dct_scale import plan_scaled_decode, scaled_ops

#: Decoded pixels kept around the window: with 2, 4:2:0 and 4:2:2 windows equal the full
#: decode's crop exactly (with 0, up to 21 levels differ on the window's edge rows/columns).
MARGIN = 2
#: A JPEG's last marker. A file without it (truncated) goes to the full decode, which raises
#: its named error, even where the window lies in the part that is there.
_EOI = b"\xff\xd9"


def window_decode(
    data: bytes, size: tuple[int, int], ops: Sequence[SampleOp], dct_scaling: bool = False, gap: float = 2.0
) -> tuple[np.ndarray, tuple[SampleOp, ...]] | None:
    """(pixels, ops on them) decoding only the window of the JPEG ``data`` (``size``: its
    width and height from the header) that ``ops``' leading Crop keeps; None where the
    full decode must run instead (see the module's docstring). ``gap``: the DCT scale's
    `plan_scaled_decode` gap (``Decode.reducing_gap``)."""
    if not turbo.available() or not ops or type(ops[0]) is not Crop or not data.endswith(_EOI):
        return None  # a truncated file goes to the full decode, which names it
    width, height = size
    crop = ops[0]
    if min(crop.x, crop.y) < 0 or min(crop.w, crop.h) < 1 or crop.x + crop.w > width or crop.y + crop.h > height:
        return None  # outside the image or empty: the full decode, and the crop's own error
    plan = plan_scaled_decode(width, height, ops, gap) if dct_scaling else None
    if plan is not None:
        ops = scaled_ops(ops, plan.denominator, plan.min_width, plan.min_height)
    c = cast(Crop, ops[0])  # still the leading Crop (scaled_ops keeps it first)
    try:
        got = turbo.decode_window(data, c.x, c.y, c.w, c.h, 1 if plan is None else plan.denominator, MARGIN)
    except turbo.TurboError:
        return None  # the full decode raises the named error for it
    if got is None:
        return None
    arr, dx, dy = got
    return arr, (Crop(dx, dy, c.w, c.h), *ops[1:])
