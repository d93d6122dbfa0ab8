#!/usr/bin/env python
"""The CPU kernel stage by stage (issue 51): where a RandomResizedCrop(224) + flip sample's CPU
time goes beyond the decode, one thread, thread CPU ms per image, on three sets: ``photos`` (the
benchmark photo set), ``varied`` (the same photos re-encoded with sides of 300-600 px, every
fourth progressive: the sizes real sets have) and ``12MP`` (bench_kernels' 4000x3000 photos).

Stages: ``read`` (the source's read), ``header`` (the structure check and the size),
``params`` (the keyed box and flip: ``sample``, a generator made per sample; ``batch``, the
batch's keyed generators made at once, `recipe.core.sample_generators`, their making shared
out per image), ``decode`` (the crop window), ``crop``, ``resize`` (antialiased bilinear to
224), ``flip+layout`` (mirror, CHW copy into the batch). Then ``kernel`` (``process_payload``
end to end) with a generator per sample and with the batch's, and ``alone`` (the full decode,
nothing else: the issue's roofline; the ratios are speed against it). Per image every variant
runs back to back, in an order that rotates, so the box's load drift hits them alike.

    python benchmarks/profile_kernel_stages.py --n 128 --large 8 --rounds 5
"""

from __future__ import annotations

import io
import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

import _harness as h
from _data import parser, photo_source
from bench_kernels import large_photo_set
from hybridload import recipe, sources
from hybridload.kernels.batch import process_payload
from hybridload.kernels.crop_window import window_decode
from hybridload.kernels.decode import decode_image, jpeg_size
from hybridload.kernels.geometry import crop, flip, resize
from hybridload.kernels.jpeg_check import check_jpeg
from hybridload.recipe.core import sample_generators
from hybridload.sources import SampleRef

log = logging.getLogger("profile_kernel_stages")
STAGES = ("read", "header", "params/sample", "params/batch", "decode", "crop", "resize", "flip+layout")
REC = recipe.Recipe([recipe.Decode(), recipe.RandomResizedCrop(224), recipe.HorizontalFlip(1.0)])


def varied_set(root: Path, photos: sources.ImageFolder) -> Path:
    """The photo set re-encoded with sides of 300-600 px, every fourth progressive, written once."""
    folder = Path(root) / f"varied-n{len(photos)}" / "class_0"
    if len(list(folder.glob("*.jpg"))) == len(photos):
        return folder.parent
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(len(photos)):
        with Image.open(photos.ref(i).location) as im:
            w, h = (int(v) for v in rng.integers(300, 601, 2))
            out = io.BytesIO()
            im.convert("RGB").resize((w, h), Image.BICUBIC).save(out, "JPEG", quality=90, progressive=i % 4 == 3)
        (folder / f"img_{i:03d}.jpg").write_bytes(out.getvalue())
    return folder.parent


def one_round(src: sources.ImageFolder, rnd: int) -> dict[str, float]:
    """{stage or variant: CPU seconds per image} over the set, one image at a time."""
    tot: dict[str, float] = {}
    out = torch.empty((3, 224, 224), dtype=torch.uint8)
    t0 = time.thread_time()
    keyed = sample_generators(0, rnd, np.arange(len(src)))
    tot["params/batch"] = time.thread_time() - t0
    jobs = ["stages", "kernel/sample", "kernel/batch", "alone"]

    def add(key: str, dt: float) -> None:
        tot[key] = tot.get(key, 0.0) + dt

    for i in range(len(src)):
        ref = src.ref(i)
        t0 = time.thread_time()
        data = src.read(ref)[0]
        add("read", time.thread_time() - t0)
        k = (i + rnd) % len(jobs)
        for job in jobs[k:] + jobs[:k]:
            t0 = time.thread_time()
            if job == "alone":
                decode_image(data)
            elif job == "kernel/sample":
                process_payload(SampleRef(i, "x.jpg", 0), data, REC, 0, rnd, out)
            elif job == "kernel/batch":
                process_payload(SampleRef(i, "x.jpg", 0), data, REC, 0, rnd, out, lambda i=i: keyed.generator(i))
            if job != "stages":
                add(job, time.thread_time() - t0)
                continue
            check_jpeg(data)
            size = jpeg_size(data)
            t1 = time.thread_time()
            ops = REC.sample_params(0, rnd, i, *size).ops
            t2 = time.thread_time()
            REC.sample_params(0, rnd, i, *size, generator=lambda i=i: keyed.generator(i))
            t3 = time.thread_time()
            got = window_decode(data, size, ops)
            arr, ops = got if got is not None else (decode_image(data), ops)
            t4 = time.thread_time()
            img = crop(torch.from_numpy(arr), ops[0])
            t5 = time.thread_time()
            img = resize(img, ops[1])
            t6 = time.thread_time()
            out.copy_(flip(img, ops[2]).permute(2, 0, 1))
            t7 = time.thread_time()
            for key, dt in zip(STAGES[1:], (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6)):
                add(key, dt)
    return {key: v / len(src) for key, v in tot.items()}


def main(argv=None) -> int:
    ap = parser(__doc__, quick=dict(n=8, rounds=1, warmup_rounds=0), n=128, rounds=5)
    ap.add_argument("--large", type=int, default=8, help="how many 12 MP photos")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    _, photos = photo_source(args.root, args.n, log)
    sets = {
        "photos": photos,
        "varied": sources.ImageFolder(varied_set(args.root, photos)),
        "12MP": sources.ImageFolder(large_photo_set(args.root, photos, args.large)),
    }
    cols = (*STAGES, "kernel/sample", "kernel/batch", "alone")
    rows = []
    for label, src in sets.items():
        per: dict[str, list[float]] = {}
        for rnd in range(args.warmup_rounds + args.rounds):
            got = one_round(src, rnd)
            if rnd >= args.warmup_rounds:
                for key, v in got.items():
                    per.setdefault(key, []).append(v)
        med = {k: float(np.median(per[k])) * 1e3 for k in cols}
        rows.append(
            [
                label,
                *(f"{med[k]:.3f}" for k in cols),
                f"{med['alone'] / med['kernel/sample']:.2f}x",
                f"{med['alone'] / med['kernel/batch']:.2f}x",
                f"{med['kernel/sample'] / med['kernel/batch']:.3f}x",
            ]
        )
    header = ["set", *cols, "sample / alone", "batch / alone", "batch / sample"]
    lines = [
        f"## profile_kernel_stages: {args.n} photos, {args.large} 12 MP photos, {args.rounds} rounds, "
        "RandomResizedCrop(224) + flip, 1 thread, thread CPU ms per image (median of rounds); "
        "the ratios are speed (alone's time / the kernel's)\n",
        h.environment_line(h.environment()),
        *h.markdown_table(header, rows),
        "",
    ]
    h.emit(lines, args, {"benchmark": "profile_kernel_stages", "rows": rows}, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
