#!/usr/bin/env python
"""hybridload's CPU kernels against DALI's CPU pipeline and a plain Pillow pipeline.

Recipe: RandomResizedCrop(224) + random flip, uint8 CHW; each round runs every contestant over
the photo set (method: _harness.py), ``torch.set_num_threads(1)``. ``kernels`` 1t
(``process_sample`` in a loop) and 2t (ThreadPoolExecutor(2) over ``process_batch``); ``dali``
1t/2t (_contestants.DaliFiles); ``pillow-ref`` (open + convert + crop + resize(BILINEAR) + flip,
same boxes and flips); decode only from bytes: Pillow vs simplejpeg. Goal: kernels >= 1.0x
DALI's CPU pipeline (same thread count, ratio of medians). Photometric rows
(_photo_contestants.py): each colour/blur/erase kernel against DALI's CPU operator for it,
one thread, on the decoded images (``--no-photometric`` skips them, ``--photometric-only``
runs only them).
"""

from __future__ import annotations

import io
import logging
import sys

import numpy as np
import torch
from PIL import Image

import _harness as h
from _contestants import DaliFiles, KernelBatches
from _photo_contestants import GOALS as PHOTO_GOALS, NOTE as PHOTO_NOTE, RATIOS as PHOTO_RATIOS, photo_contestants
from _data import parser, photo_source
from hybridload import kernels, recipe

log = logging.getLogger("bench_kernels")
GOALS = {"kernels / DALI, 1 thread": 1.0, "kernels / DALI, 2 threads": 1.0}
RATIOS = {  # name: (a, b, field)
    "kernels / DALI, 1 thread": ("kernels/1t", "dali/1t", "images_per_s"),
    "kernels / DALI, 2 threads": ("kernels/2t", "dali/2t", "images_per_s"),
    "kernels / DALI per CPU-second, 1 thread": ("kernels/1t", "dali/1t", "images_per_cpu_s"),
    "kernels / DALI per CPU-second, 2 threads": ("kernels/2t", "dali/2t", "images_per_cpu_s"),
    "kernels / pillow-ref, 1 thread": ("kernels/1t", "pillow-ref/1t", "images_per_s"),
    "simplejpeg / Pillow decode, 1 thread": ("simplejpeg-decode/1t", "pillow-decode/1t", "images_per_s"),
    "kernels 2 threads / 1 thread": ("kernels/2t", "kernels/1t", "images_per_s"),
    "DALI 2 threads / 1 thread": ("dali/2t", "dali/1t", "images_per_s"),
}


def pillow_reference(source, rec):
    """The straightforward Pillow pipeline, torchvision style, with the kernels' crop boxes."""

    def one(i: int) -> torch.Tensor:
        with Image.open(source.ref(i).location) as im:
            img = im.convert("RGB")
        for op in rec.sample_params(0, 0, i, img.width, img.height).ops:
            kind, a = (
                (op[0], op[1:]) if isinstance(op, tuple) else (type(op).__name__.lower(), tuple(vars(op).values()))
            )
            if kind == "crop":
                img = img.crop((a[0], a[1], a[0] + a[2], a[1] + a[3]))
            elif kind == "resize":
                img = img.resize((a[1], a[0]), Image.BILINEAR)
            elif kind == "flip":
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.array(img)).permute(2, 0, 1).contiguous()  # as torchvision's pil_to_tensor

    return one


def pillow_decode(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        return np.asarray(im if im.mode == "RGB" else im.convert("RGB"))


def main(argv=None) -> int:
    ap = parser(__doc__, quick=dict(n=64, rounds=1, warmup_rounds=0), batch_size=64, size=224)
    ap.add_argument("--no-dali", action="store_true", help="skip the DALI contestants")
    ap.add_argument("--no-photometric", action="store_true", help="skip the photometric kernels' rows")
    ap.add_argument("--photometric-only", action="store_true", help="only the photometric kernels' rows")
    args = ap.parse_args(argv)
    if args.no_photometric and args.photometric_only:
        ap.error("--no-photometric and --photometric-only exclude each other; pass one")
    torch.set_num_threads(1)
    folder, source = photo_source(args.root, args.n, log)
    rec = recipe.imagenet_train(args.size)
    payloads = [open(source.ref(i).location, "rb").read() for i in range(len(source))]
    env = h.environment(dali=h.dali_version(args.no_dali, log))
    import simplejpeg

    def dali_c(t):
        return [DaliFiles(folder, args.n, t, args.batch_size, args.size, name=f"dali/{t}t")] if env.get("dali") else []

    cs = (
        []
        if args.photometric_only
        else [
            h.per_item("kernels/1t", lambda i: kernels.process_sample(source, rec, i, seed=0, epoch=0), range(args.n)),
            *dali_c(1),
            KernelBatches("kernels/2t", source, rec, args.batch_size, threads=2, shuffle=False),
            *dali_c(2),
            h.per_item("pillow-ref/1t", pillow_reference(source, rec), range(args.n)),
            h.per_item("pillow-decode/1t", pillow_decode, payloads),
            h.per_item("simplejpeg-decode/1t", lambda d: simplejpeg.decode_jpeg(d, colorspace="RGB"), payloads),
        ]
    )
    ratio_defs, goals = ({}, {}) if args.photometric_only else (dict(RATIOS), dict(GOALS))
    if not args.no_photometric:
        crop = recipe.make(
            [recipe.Decode(), recipe.Resize(args.size), recipe.CenterCrop(args.size), recipe.ToTensor(layout="HWC")]
        )
        decoded = [kernels.process_sample(source, crop, i, seed=0, epoch=0)[0].numpy() for i in range(args.n)]
        cs += photo_contestants(decoded, args.batch_size, dali=bool(env.get("dali")))
        ratio_defs.update(PHOTO_RATIOS if env.get("dali") else {})
        goals.update(PHOTO_GOALS if env.get("dali") else {})
    results = h.set_up_and_run(cs, args.rounds, args.warmup_rounds, log)
    ratios = {k: h.ratio(results, a, b, f) for k, (a, b, f) in ratio_defs.items()}
    lines = [
        f"## bench_kernels: {args.n} photo JPEGs, {args.rounds} interleaved rounds (after {args.warmup_rounds} "
        f"untimed), RandomResizedCrop({args.size}) + flip, uint8 CHW\n",
        h.environment_line(env),
        *h.results_table(results),
        "",
        h.CONTENTION_NOTE,
        "",
        *h.ratio_table(ratios, goals),
        "",
        *([] if args.no_photometric else [PHOTO_NOTE, ""]),
    ]
    h.emit(
        lines,
        args,
        {
            "benchmark": "bench_kernels",
            "dataset": str(folder),
            "environment": env,
            "contestants": results,
            "ratios": ratios,
            "goals": h.goals_met(ratios, goals),
        },
        log,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
