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

import logging
import sys

import numpy as np

import _harness as h
from _data import parser, photo_source
from hybridload import recipe
from hybridload.lanes._base import BatchTask
from hybridload.lanes._gpu.feed import join_batch, read_batch
from hybridload.lanes._gpu.prep import PrepPool
from hybridload._policy import usable_cpus

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
    ap = parser(__doc__, quick=dict(n=128, batches=2, rounds=1, batch_size=64), n=512, rounds=5, batch_size=256)
    ap.add_argument("--batches", type=int, default=4, help="batches per round and contestant")
    ap.add_argument("--threads", type=int, default=2, help="the prep pool's threads (and processes)")
    args = ap.parse_args(argv)
    _, src = photo_source(args.root, args.n, log)
    rec, bs, cores = recipe.imagenet_train(224), args.batch_size, usable_cpus()
    pools = {kind: PrepPool(src, rec, args.threads, kind) for kind in ("threads", "processes")}

    def contestant(name: str, threads: int, fn) -> h.Contestant:
        c = h.Contestant(name, lambda epoch: fn(tasks_for(len(src), bs, args.batches, epoch)))
        c.threads = min(threads, cores)
        return c

    cs = [contestant("serial", 1, lambda t: serial(src, rec, t))]
    cs += [contestant(f"{kind}-{args.threads}", args.threads, lambda t, p=p: pooled(p, t)) for kind, p in pools.items()]
    try:
        results = h.set_up_and_run(cs, args.rounds, args.warmup_rounds, log)
    finally:
        for pool in pools.values():
            pool.shutdown()
    base = results["serial"]["median_images_per_s"]
    per_core = ("per core", lambda r: f"{r['median_images_per_s'] / r['threads']:,.0f}")
    vs_serial = ("vs serial", lambda r: f"{r['median_images_per_s'] / base:.2f}")
    lines = [
        f"## bench_gpu_host: batch {bs}, {len(src)} photos, {cores} cores, {args.rounds} interleaved rounds\n",
        *h.results_table(results, ("median", per_core, vs_serial, "cpu", "other")),
        "",
    ]
    h.emit(lines, args, {"benchmark": "bench_gpu_host", "batch_size": bs, "cores": cores, "contestants": results}, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
