#!/usr/bin/env python
"""The CPU kernel stage by stage (issue 37): where a RandomResizedCrop(224) + flip sample's
CPU time goes, with the full decode and with the crop-window decode (kernels/crop_window.py),
on the photo set and on 12 MP photos, one thread.

Stages, CPU seconds per image (``time.thread_time``; per image, every variant and the full
decode alone one after the other, in a rotating order, so the box's load drift hits them
alike): ``header`` (jpeg_size +
the keyed crop box), ``decode`` (the full decode, or the window), ``crop`` (the view),
``resize`` (antialiased bilinear to 224), ``flip+layout`` (mirror, CHW copy into the batch),
then ``kernel`` (``process_payload`` end to end, the sum's check), ``lane`` (HybridLoader on
the in-process lane, one thread, batch 32, ``EPOCHS`` passes after an untimed one, against
``process_sample`` over the same samples in a loop run before and after it, process CPU time:
the loader's own cost, as a fraction applied to the kernel) and
``alone`` (the full decode alone, no crop or resize: the issue's roofline; its ratios are
speed per CPU-second of the kernel and of the loader against it).
``--rounds`` rounds; the median per stage is shown.
"""

from __future__ import annotations

import functools
import logging
import sys
import time

import numpy as np
import torch

import _harness as h
from _data import parser, photo_source
from bench_large_photos import large_photo_set
from hybridload import HybridLoader, LoaderPolicy, kernels, recipe, sources
from hybridload.sources import SampleRef
from hybridload.kernels.batch import process_payload
from hybridload.kernels.crop_window import window_decode
from hybridload.kernels.decode import decode_image, jpeg_size
from hybridload.kernels.geometry import crop, flip, resize

log = logging.getLogger("profile_crop_stages")
STAGES = ("header", "decode", "crop", "resize", "flip+layout")


#: name: (crop_window, dct_scaling, reducing_gap)
VARIANTS = {
    "full": (False, False, 2.0),
    "window": (True, False, 2.0),
    "window+dct": (True, True, 2.0),
    "window+dct gap 1": (True, True, 1.0),
}


@functools.lru_cache(maxsize=None)
def _rec(window: bool, dct: bool, gap: float) -> recipe.Recipe:
    """One recipe per variant, built once (every call of a run reuses it, as a loader does)."""
    return recipe.Recipe(
        [
            recipe.Decode(crop_window=window, dct_scaling=dct, reducing_gap=gap),
            recipe.RandomResizedCrop(224),
            recipe.HorizontalFlip(1.0),
        ]
    )


def stage_times(data: bytes, i: int, rec: recipe.Recipe, variant: tuple, out: torch.Tensor) -> list[float]:
    """CPU seconds of each stage for sample ``i`` (flip always applied)."""
    window, dct, gap = variant
    t0 = time.thread_time()
    size = jpeg_size(data)
    ops = rec.sample_params(0, 0, i, *size).ops
    t1 = time.thread_time()
    got = window_decode(data, size, ops, dct, gap) if window else None
    arr, ops = got if got is not None else (decode_image(data), ops)
    t2 = time.thread_time()
    img = crop(torch.from_numpy(arr), ops[0])
    t3 = time.thread_time()
    img = resize(img, ops[1])
    t4 = time.thread_time()
    out.copy_(flip(img, ops[2]).permute(2, 0, 1))
    t5 = time.thread_time()
    return [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4]


def paired_round(payloads: list[bytes], rnd: int) -> dict[tuple[str, str], float]:
    """{(variant, stage | "kernel" | "alone"): CPU seconds per image}: per image, every variant's
    stages, its whole kernel (``process_payload``) and the full decode alone, one after the
    other in an order that rotates, so load drift hits them alike."""
    tot: dict[tuple[str, str], float] = {}
    out = torch.empty((3, 224, 224), dtype=torch.uint8)
    jobs = [*VARIANTS, "alone"]
    for i, data in enumerate(payloads):
        k = (i + rnd) % len(jobs)
        for name in jobs[k:] + jobs[:k]:
            if name == "alone":
                t0 = time.thread_time()
                decode_image(data)
                tot[("full", "alone")] = tot.get(("full", "alone"), 0.0) + time.thread_time() - t0
                continue
            rec = _rec(*VARIANTS[name])
            for st, dt in zip(STAGES, stage_times(data, i, rec, VARIANTS[name], out)):
                tot[(name, st)] = tot.get((name, st), 0.0) + dt
            t0 = time.thread_time()
            process_payload(SampleRef(i, "x.jpg", 0), data, rec, 0, 0)
            tot[(name, "kernel")] = tot.get((name, "kernel"), 0.0) + time.thread_time() - t0
    return {key: v / len(payloads) for key, v in tot.items()}


#: Timed passes of the kernel loop and of the loader (epochs 1..EPOCHS, the same keyed samples).
EPOCHS = 3


def kernel_loop_time(source, rec) -> float:
    t0 = time.process_time()
    for epoch in range(1, EPOCHS + 1):
        for i in range(len(source)):
            kernels.process_sample(source, rec, i, seed=0, epoch=epoch)
    return (time.process_time() - t0) / (EPOCHS * len(source))


def loader_time(source, rec) -> float:
    """Process CPU seconds per image of the loader's passes 1..EPOCHS, after an untimed pass 0
    (the lane's start is not per image; each pass's own start is counted)."""
    with HybridLoader(
        source,
        rec,
        32,
        shuffle=False,
        drop_last=False,
        device="cpu",
        seed=0,
        policy=LoaderPolicy(mode="cpu", cpu_actors=0, threads=1),
    ) as ld:
        for _ in ld:
            pass
        t0 = time.process_time()
        for epoch in range(1, EPOCHS + 1):
            ld.set_epoch(epoch)
            for _ in ld:
                pass
        return (time.process_time() - t0) / (EPOCHS * len(source))


def main(argv=None) -> int:
    ap = parser(__doc__, quick=dict(n=8, rounds=1, warmup_rounds=0), n=64, rounds=3)
    ap.add_argument("--large", type=int, default=8, help="how many 12 MP photos")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    _, photos = photo_source(args.root, args.n, log)
    large = sources.ImageFolder(large_photo_set(args.root, photos, args.large))
    rows = []
    for label, src in (("photos", photos), ("12MP", large)):
        payloads = [src.read(src.ref(i))[0] for i in range(len(src))]
        per = {}
        for rnd in range(args.rounds):
            got = paired_round(payloads, rnd)
            for name, variant in VARIANTS.items():
                rec = _rec(*variant)
                before, loader = kernel_loop_time(src, rec), loader_time(src, rec)  # the loader between two loops
                loop = (before + kernel_loop_time(src, rec)) / 2
                got[(name, "loader")] = got[(name, "kernel")] * loader / loop
                got[(name, "lane")] = got[(name, "loader")] - got[(name, "kernel")]
                got[(name, "alone")] = got[("full", "alone")]
            for key, v in got.items():
                per.setdefault(key, []).append(v)
        for name in VARIANTS:
            med = {k: float(np.median(per[(name, k)])) * 1e3 for k in (*STAGES, "kernel", "lane", "loader", "alone")}
            rows.append(
                [
                    label,
                    name,
                    *(f"{med[k]:.2f}" for k in (*STAGES, "kernel", "lane")),
                    f"{100 * med['lane'] / med['kernel']:.0f}%",
                    f"{med['alone']:.2f}",
                    f"{med['alone'] / med['kernel']:.2f}x",
                    f"{med['alone'] / med['loader']:.2f}x",
                ]
            )
    lines = [
        f"## profile_crop_stages: {args.n} photos + {args.large} 12 MP photos, {args.rounds} rounds, "
        "RandomResizedCrop(224) + flip, 1 thread, CPU ms per image (median of rounds)\n",
        h.environment_line(h.environment()),
        *h.markdown_table(
            [
                "set",
                "decode",
                *STAGES,
                "kernel",
                "lane overhead",
                "lane / kernel",
                "full decode alone",
                "kernel speed / decode alone",
                "loader speed / decode alone",
            ],
            rows,
        ),
        "",
    ]
    h.emit(lines, args, {"benchmark": "profile_crop_stages", "rows": rows}, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
