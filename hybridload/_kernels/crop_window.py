"""Decode only the window of a JPEG its leading ``Crop`` keeps, bit-identical to that crop of the
full decode and chosen from the bytes and ops alone, so every CPU lane decides alike (what falls
back to the full decode, and the one difference: docs/guide/recipes.md, "Decoding only the crop")."""

from __future__ import annotations

from typing import Sequence, cast

import numpy as np

from hybridload.recipe._custom import SampleOp
from hybridload.recipe._ops import Crop

from hybridload._kernels import turbo
from hybridload._kernels.dct_scale import plan_scaled_decode, scaled_ops

#: Decoded pixels kept around the window: with 2, 4:2:0 and 4:2:2 windows equal the full
#: decode's crop exactly (with 0, up to 21 levels differ on the window's edge rows/columns).
MARGIN = 2
#: A JPEG's last marker. A file without it (truncated) goes to the full decode, which raises
#: its named error, even where the window lies in the part that is there.
_EOI = b"\xff\xd9"


def window_decode(
    data: bytes,
    size: tuple[int, int],
    ops: Sequence[SampleOp],
    dct_scaling: bool = False,
    gap: float = 2.0,
    header: turbo.Handle | None = None,
) -> tuple[np.ndarray, tuple[SampleOp, ...]] | None:
    """(pixels, ops on them) for the window of ``data`` (``size`` from its header) that ``ops``'
    leading Crop keeps; None where the full decode must run. ``header``: the decompressor that
    read ``size`` (`turbo.read_header`), if any."""
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
        got = turbo.decode_window(data, c.x, c.y, c.w, c.h, 1 if plan is None else plan.denominator, MARGIN, header)
    except turbo.TurboError:
        return None  # the full decode raises the named error for it
    if got is None:
        return None
    arr, dx, dy = got
    return arr, (Crop(dx, dy, c.w, c.h), *ops[1:])
