#!/usr/bin/env python
"""Pixels of the crop-window decode against today's full decode (issue 37), per chroma
subsampling: mean and largest |difference| of the 224x224 RandomResizedCrop + flip output,
``Decode()`` (the window), ``Decode(dct_scaling=True)`` (the window at a DCT scale) and
``Decode(dct_scaling=True, reducing_gap=1.0)`` (at the smallest DCT scale covering the output) against
``Decode(crop_window=False)`` (the full decode), over the photo set's first ``--n`` photos
re-encoded at 4:4:4, 4:2:2, 4:2:0 and grey, baseline and progressive, at their size and
scaled 4x (about 1600x1500: DCT scaling applies to most crops), ``--draws`` boxes each.
"""

from __future__ import annotations

import io
import logging
import sys

import numpy as np
import torch
from PIL import Image

import _harness as h
from _data import parser, photo_source
from hybridload import recipe
from hybridload.kernels.batch import process_payload
from hybridload.sources import SampleRef

log = logging.getLogger("crop_window_pixels")
SUBSAMPLING = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2, "grey": None}


def _rec(**decode) -> recipe.Recipe:
    return recipe.Recipe([recipe.Decode(**decode), recipe.RandomResizedCrop(224), recipe.HorizontalFlip()])


def encode(im: Image.Image, sub, progressive: bool) -> bytes:
    out = io.BytesIO()
    if sub is None:
        im.convert("L").save(out, "JPEG", quality=90, progressive=progressive)
    else:
        im.save(out, "JPEG", quality=90, subsampling=sub, progressive=progressive)
    return out.getvalue()


def main(argv=None) -> int:
    ap = parser(__doc__, quick=dict(n=4), n=16)
    ap.add_argument("--draws", type=int, default=4, help="crop boxes drawn per image")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    _, photos = photo_source(args.root, max(args.n, 64), log)
    full = _rec(crop_window=False)
    variants = {
        "window": _rec(),
        "window+dct": _rec(dct_scaling=True),
        "window+dct gap 1": _rec(dct_scaling=True, reducing_gap=1.0),
    }
    rows = []
    for scale in (1, 4):
        for name, sub in SUBSAMPLING.items():
            diffs: dict[str, list] = {k: [] for k in variants}
            for i in range(args.n):
                with Image.open(photos.ref(i).location) as im:
                    im = im.convert("RGB")
                    im = im.resize((im.width * scale, im.height * scale), Image.BICUBIC) if scale > 1 else im
                for prog in (False, True):
                    data = encode(im, sub, prog)
                    for d in range(args.draws):
                        ref = SampleRef(i, "x.jpg", 0)
                        a = process_payload(ref, data, full, 0, d).float()
                        for k, rec in variants.items():
                            diffs[k].append((process_payload(ref, data, rec, 0, d).float() - a).abs())
            for k, ds in diffs.items():
                rows.append(
                    [
                        f"{'photo set' if scale == 1 else 'photo set x4'}",
                        name,
                        k,
                        f"{np.mean([x.mean().item() for x in ds]):.3f}",
                        f"{max(x.max().item() for x in ds):.0f}",
                    ]
                )
    lines = [
        f"## crop_window_pixels: {args.n} photos x {args.draws} boxes, baseline + progressive, "
        "RandomResizedCrop(224) + flip, against Decode(crop_window=False)\n",
        *h.markdown_table(["images", "subsampling", "decode", "mean abs diff", "max abs diff"], rows),
        "",
    ]
    h.emit(lines, args, {"benchmark": "crop_window_pixels", "rows": rows}, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
