"""The torch GPU lane's host preparation: images/s per core of reading each sample and drawing its
keyed parameters (the part of the lane no GPU speeds up), one thread one image at a time (the
lane before issue 34.6) against the lane's prep pool (parts of each batch on ``--threads``
threads, the next batch started while the current one is taken). CPU tensors: no CUDA is needed,
so it runs here; on the GPU machine the same figure says how many cores feed nvJPEG.

Contestants (interleaved rounds, median): ``serial`` (feed.read_batch), ``threads-N`` and
``processes-N`` (the lane's PrepPool of N threads or worker processes, the next batch started
before the current one is joined, as in the lane). Per core = images/s divided by the cores the contestant can use
(min(threads, cores)). The op launches are not in it: on CPU tensors the ops compute instead of
launching, so their host cost is for gpu_check's ``headline`` (lane alone against decode + resize).
"""

from __future__ import annotations

import functools
import json
import logging
import statistics
import time

import numpy as np
from hybridload import recipe
from hybridload.lanes.base import BatchTask
from hybridload.lanes.gpu.feed import join_batch, read_batch
from hybridload.lanes.gpu.prep import PrepPool
from hybridload.policy import usable_cpus

from _data import parser, photo_source

log = logging.getLogger("bench_gpu_host")


def tasks_for(n_images: int, bs: int, batches: int, epoch: int) -> list[BatchTask]:
    order = np.random.default_rng(epoch).permutation(n_images)
    return [BatchTask(k, epoch, order[(np.arange(bs) + k * bs) % n_images]) for k in range(batches)]


def serial(src, rec, tasks) -> int:
    return sum(len(read_batch(src, rec, t).payloads) for t in tasks)


def pooled(pool, tasks) -> int:
    seen, ahead = 0, pool.start(tasks[0])
    for k in range(len(tasks)):
        now = ahead
        if k + 1 < len(tasks):
            ahead = pool.start(tasks[k + 1])  # the next one, as the lane does
        seen += len(join_batch(now).payloads)
    return seen


def main(argv=None) -> int:
    ap = parser(__doc__, quick="--n 128 --batches 2 --rounds 1", n=512, rounds=5)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--batches", type=int, default=4, help="batches per round and contestant")
    ap.add_argument("--threads", type=int, default=2, help="the prep pool's threads (and processes)")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.batches, args.rounds, args.batch_size = 128, 2, 1, 64
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    _, src = photo_source(args.root, args.n, log)
    rec, bs, cores = recipe.imagenet_train(224), args.batch_size, usable_cpus()
    pools = {kind: PrepPool(src, rec, args.threads, kind) for kind in ("threads", "processes")}
    contestants = {
        "serial": (1, lambda t: serial(src, rec, t)),
        **{f"{kind}-{args.threads}": (args.threads, functools.partial(pooled, pool)) for kind, pool in pools.items()},
    }
    rates: dict[str, list[float]] = {k: [] for k in contestants}
    for r in range(args.warmup_rounds + args.rounds):
        names = list(contestants)[r % len(contestants) :] + list(contestants)[: r % len(contestants)]
        for name in names:
            tasks = tasks_for(len(src), bs, args.batches, r)
            t0 = time.perf_counter()
            n = contestants[name][1](tasks)
            if r >= args.warmup_rounds:
                rates[name].append(n / (time.perf_counter() - t0))
    for pool in pools.values():
        pool.shutdown()
    base = statistics.median(rates["serial"])
    rows = {
        k: {
            "img_s": statistics.median(v),
            "per_core": statistics.median(v) / min(contestants[k][0], cores),
            "vs_serial": statistics.median(v) / base,
        }
        for k, v in rates.items()
    }
    print(f"| contestant | images/s | per core | vs serial |  (batch {bs}, {len(src)} photos, {cores} cores)")
    print("| --- | --- | --- | --- |")
    for k, v in rows.items():
        print(f"| {k} | {v['img_s']:,.0f} | {v['per_core']:,.0f} | {v['vs_serial']:.2f} |")
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "batch_size": bs, "cores": cores, "n": len(src)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
