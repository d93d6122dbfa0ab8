#!/usr/bin/env python
"""The floor under the crop-window kernel (issue 37): what libjpeg-turbo 3 spends on a whole
JPEG at each DCT scale (1/1, 1/2, 1/4, 1/8; at 1/8 the inverse DCT keeps only the DC
coefficient, so that row is nearly all entropy decoding, which no window or scale skips for
the rows above a window's bottom), beside the full decode alone (simplejpeg) and the kernel's
antialiased resize of each sample's keyed RandomResizedCrop(224) window. One thread, thread
CPU ms per image, the minimum over ``--rounds`` rounds (each round times every row in turn).
"""

from __future__ import annotations

import logging
import sys
import time

import numpy as np
import torch

import _harness as h
from _data import parser, photo_source
from bench_large_photos import large_photo_set
from hybridload import recipe, sources
from hybridload.kernels import turbo
from hybridload.kernels.dct_scale import scaled_size
from hybridload.kernels.crop_window import window_decode
from hybridload.kernels.decode import decode_image, jpeg_size
from hybridload.kernels.geometry import crop, resize

log = logging.getLogger("decode_floor")


def _rows(payloads: list[bytes]) -> dict[str, callable]:
    rec = recipe.Recipe([recipe.Decode(), recipe.RandomResizedCrop(224)])
    windows = []
    for i, data in enumerate(payloads):
        size = jpeg_size(data)
        arr, ops = window_decode(data, size, rec.sample_params(0, 0, i, *size).ops)
        windows.append((torch.from_numpy(arr), ops))

    def each(fn):  # one call per image, nothing kept (a list of 36 MB images would time page faults)
        return lambda: [fn(i, p) and None for i, p in enumerate(payloads)]

    rows = {"full decode alone (simplejpeg)": each(lambda i, p: decode_image(p).shape)}
    for d in turbo.DENOMINATORS:  # the whole image as one window, at 1/d
        rows[f"libjpeg-turbo 3, whole image at 1/{d}"] = each(
            lambda i, p, d=d: turbo.decode_window(p, 0, 0, *scaled_size(*jpeg_size(p), d), d)[0].shape
        )
    rows["crop window (RandomResizedCrop box)"] = each(
        lambda i, p: window_decode(p, jpeg_size(p), rec.sample_params(0, 0, i, *jpeg_size(p)).ops)[0].shape
    )
    rows["resize of the window's crop to 224"] = each(
        lambda i, p: resize(crop(*windows[i][:1], windows[i][1][0]), windows[i][1][1]).shape
    )
    return rows


def main(argv=None) -> int:
    ap = parser(__doc__, quick=dict(n=8, rounds=1, warmup_rounds=0), n=64, rounds=3)
    ap.add_argument("--large", type=int, default=8, help="how many 12 MP photos")
    args = ap.parse_args(argv)
    if not turbo.available():
        raise SystemExit("the turbojpeg wheel is not installed: nothing to measure")
    torch.set_num_threads(1)
    _, photos = photo_source(args.root, args.n, log)
    large = sources.ImageFolder(large_photo_set(args.root, photos, args.large))
    table = []
    for label, src in (("photos", photos), ("12MP", large)):
        payloads = [src.read(src.ref(i))[0] for i in range(len(src))]
        rows, best = _rows(payloads), {}
        for _ in range(args.rounds):
            for name, run in rows.items():
                t0 = time.thread_time()
                run()
                best[name] = min(best.get(name, np.inf), (time.thread_time() - t0) / len(payloads))
        alone = best["full decode alone (simplejpeg)"]
        table += [[label, name, f"{v * 1e3:.3f}", f"{v / alone:.2f}"] for name, v in best.items()]
    lines = [
        f"## decode_floor: {args.n} photos + {args.large} 12 MP photos, min of {args.rounds} rounds, "
        "1 thread, CPU ms per image\n",
        h.environment_line(h.environment()),
        *h.markdown_table(["set", "what", "ms per image", "x the full decode alone"], table),
        "",
    ]
    h.emit(lines, args, {"benchmark": "decode_floor", "rows": table}, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
