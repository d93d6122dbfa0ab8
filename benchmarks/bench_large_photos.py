#!/usr/bin/env python
"""The CPU kernels with and without DCT-scaled decode, on large photos and on the photo set.

Recipe: RandomResizedCrop(224) + random flip, uint8 CHW. ``full``: ``Decode()`` (always the
full decode); ``dct``: ``Decode(dct_scaling=True)`` (libjpeg-turbo's 1/2, 1/4, 1/8 scaled
decode where the crop keeps at least twice the output's pixels; ``kernels/dct_scale.py``).
Each at 1 thread (``process_sample`` in a loop) and 2 threads (ThreadPoolExecutor(2) over
``process_batch``), beside DALI's CPU pipeline (decoders.image_random_crop + resize +
crop_mirror_normalize), in interleaved rounds (method: _harness.py).

Large photos: the photo set's images scaled up to 4000x3000 (12 MP, a phone camera's size)
with a little grain so they compress like photographs (about 1.5-2 MB each at quality 90,
4:2:0), written once under ``ROOT/large-n<N>``. The pixel rows give the mean and largest
|difference| of ``dct`` against ``full`` per image. Goal: ``dct`` >= 2x ``full`` on large
photos; no loss on the photo set (its crops are too small to scale at 224).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import simplejpeg
import torch
from PIL import Image

import _harness as h
from _contestants import DaliFiles, KernelBatches
from _data import parser, photo_source
from hybridload import kernels, recipe, sources

log = logging.getLogger("bench_large_photos")
GOALS = {"large: dct / full, 1 thread": 2.0, "large: dct / full, 2 threads": 2.0, "large: dct / DALI, 2 threads": 1.5}
RATIOS = {
    "large: dct / full, 1 thread": ("large/dct/1t", "large/full/1t", "images_per_s"),
    "large: dct / full, 2 threads": ("large/dct/2t", "large/full/2t", "images_per_s"),
    "large: dct / full per CPU-second, 2 threads": ("large/dct/2t", "large/full/2t", "images_per_cpu_s"),
    "large: dct / DALI, 2 threads": ("large/dct/2t", "large/dali/2t", "images_per_s"),
    "large: full / DALI, 2 threads": ("large/full/2t", "large/dali/2t", "images_per_s"),
    "photos: dct / full, 1 thread": ("photos/dct/1t", "photos/full/1t", "images_per_s"),
    "photos: dct / full, 2 threads": ("photos/dct/2t", "photos/full/2t", "images_per_s"),
}


def large_photo_set(root: Path, photos: sources.ImageFolder, n: int) -> Path:
    """``n`` 4000x3000 JPEGs made from the photo set (one class folder), written once."""
    folder = Path(root) / f"large-n{n}" / "class_0"
    if len(list(folder.glob("*.jpg"))) == n:
        return folder.parent
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        with Image.open(photos.ref(i % len(photos)).location) as im:
            big = np.asarray(im.convert("RGB").resize((4000, 3000), Image.BICUBIC), dtype=np.int16)
        grain = rng.integers(-2, 3, big.shape, dtype=np.int16)
        data = simplejpeg.encode_jpeg((big + grain).clip(0, 255).astype(np.uint8), quality=90, colorsubsampling="420")
        (folder / f"img_{i:03d}.jpg").write_bytes(data)
    return folder.parent


def per_item(name: str, source, rec) -> h.Contestant:
    return h.per_item(name, lambda i: kernels.process_sample(source, rec, i, seed=0, epoch=0), range(len(source)))


def pixel_rows(source, full, dct, n: int) -> list[str]:
    """Mean and largest |dct - full| per image over the first ``n`` samples (epoch 0)."""
    means, peaks = [], []
    for i in range(min(n, len(source))):
        a = kernels.process_sample(source, full, i, seed=0, epoch=0)[0].float()
        b = kernels.process_sample(source, dct, i, seed=0, epoch=0)[0].float()
        means.append((a - b).abs().mean().item())
        peaks.append((a - b).abs().max().item())
    return [f"{np.mean(means):.2f}", f"{np.max(means):.2f}", f"{np.max(peaks):.0f}"]


def main(argv=None) -> int:
    ap = parser(__doc__, quick=dict(n=8, rounds=1, warmup_rounds=0), n=24, rounds=3, batch_size=8, size=224)
    ap.add_argument("--no-dali", action="store_true", help="skip the DALI contestants")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    folder, photos = photo_source(args.root, max(args.n, 64), log)
    large_root = large_photo_set(args.root, photos, args.n)
    large = sources.ImageFolder(large_root)
    full = recipe.Recipe([recipe.Decode(), recipe.RandomResizedCrop(args.size), recipe.HorizontalFlip()])
    dct = recipe.Recipe([recipe.Decode(dct_scaling=True), recipe.RandomResizedCrop(args.size), recipe.HorizontalFlip()])
    env = h.environment(dali=h.dali_version(args.no_dali, log))
    cs = []
    for label, src in (("large", large), ("photos", photos)):
        for kind, rec in (("full", full), ("dct", dct)):
            cs += [
                per_item(f"{label}/{kind}/1t", src, rec),
                KernelBatches(f"{label}/{kind}/2t", src, rec, args.batch_size, threads=2, shuffle=False),
            ]
    if env.get("dali"):
        cs.append(DaliFiles(large_root, args.n, 2, args.batch_size, args.size, name="large/dali/2t"))
    results = h.set_up_and_run(cs, args.rounds, args.warmup_rounds, log)
    ratios = {k: h.ratio(results, a, b, f) for k, (a, b, f) in RATIOS.items()}
    pixels = h.markdown_table(
        ["set", "mean abs(dct - full), average", "worst image", "largest"],
        [
            ["large (12 MP)", *pixel_rows(large, full, dct, args.n)],
            [f"photos (first {args.n})", *pixel_rows(photos, full, dct, args.n)],
        ],
    )
    lines = [
        f"## bench_large_photos: {args.n} large (4000x3000) and {len(photos)} photo-set JPEGs, {args.rounds} "
        f"interleaved rounds, RandomResizedCrop({args.size}) + flip, uint8 CHW\n",
        h.environment_line(env),
        *h.results_table(results),
        "",
        h.CONTENTION_NOTE,
        "",
        *h.ratio_table(ratios, GOALS),
        "",
        *pixels,
        "",
    ]
    h.emit(
        lines,
        args,
        {
            "benchmark": "bench_large_photos",
            "dataset": str(large_root),
            "environment": env,
            "contestants": results,
            "ratios": ratios,
            "goals": h.goals_met(ratios, GOALS),
        },
        log,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
