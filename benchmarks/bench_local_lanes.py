#!/usr/bin/env python
"""The local lanes (no Ray), one measurement a run (``--measure``).

``--measure torch`` (the default): threads vs worker processes vs torch's DataLoader. For each
worker count and pipeline, the three contestants run in interleaved rounds over the same photo
set (``_harness``: a burst of other load hits all of them); reported per contestant: median
images/s with CPU use and contention, and the ratios to torch's DataLoader with the same worker
count; also the first-batch latency of ``HybridLoader(..., policy=LoaderPolicy())``. Two
pipelines (``--pipelines``), each loader delivering the same kind of batch as its torch
contestant:

* ``uint8``: Pillow open, the sample's RandomResizedCrop box, bilinear resize, flip, uint8 CHW
  tensor (``_peer_loaders.PilSample``, the peers job's torch contestant); against
  ``imagenet_train(size)``;
* ``normalized``: the same, then what torchvision's reference recipe adds in the workers
  (``ToDtype(float32, scale=True)``, ``Normalize`` with ImageNet's mean and std): float32
  batches; against ``imagenet_train(size, normalize=True)``, which normalizes on the loader's
  device (here the CPU, in the consumer's thread).

``--measure threads``: the in-process lane's threads against the trainer's intra-op thread
pool: "own" (one intra-op thread each, ``lanes/local/inprocess.one_intraop_thread``) or
"shared" (the process's intra-op threads, with the trainer's), at 1 and 2 lane threads, each
run for ``--seconds``; the lane takes "own" for one thread and "shared" for more.

    python benchmarks/bench_local_lanes.py --n 256 --workers-list 1,2 --rounds 3
    python benchmarks/bench_local_lanes.py --measure threads --n 256 --rounds 3 --seconds 4
"""

from __future__ import annotations

import statistics
import time

import torch

import _harness as h
from _contestants import Loader
from _peer_loaders import torch_pil
from _data import parser, photo_source
from hybridload import HybridLoader, LoaderPolicy, recipe
from hybridload.lanes._local import inprocess


PIPELINES = {"uint8": False, "normalized": True}  # whether the batches are normalized
KINDS = ("threads", "processes")


def compare(src, args, w: int, pipeline: str) -> tuple[dict, dict]:
    """One pipeline at ``w`` workers: threads, processes and torch's DataLoader, interleaved.
    Returns (summaries by contestant, ratios)."""
    normalize = PIPELINES[pipeline]
    rec = recipe.imagenet_train(args.size, normalize=normalize)
    contestants = [
        Loader(k, src, rec, args.batch_size, LoaderPolicy(threads=w, local_workers=k), threads=w) for k in KINDS
    ]
    contestants.append(torch_pil("torch", src, rec, args.batch_size, w, normalize=normalize))
    results = h.set_up_and_run(contestants, args.rounds, args.warmup_rounds, label=f"[{pipeline}, {w} workers] ")
    ratios = {
        "threads / torch": h.ratio(results, "threads", "torch"),
        "processes / torch": h.ratio(results, "processes", "torch"),
        "processes / threads": h.ratio(results, "processes", "threads"),
    }
    return results, ratios


POOL = inprocess.DaemonPool


def thread_rate(src, threads: int, own_pool: bool, seconds: float, batch: int) -> float:
    """Images/s of the in-process lane with ``threads`` threads, each with its own intra-op
    thread (``own_pool``) or the process's shared ones."""
    inprocess.DaemonPool = lambda n, name, own_intraop=False: POOL(n, name, own_intraop=own_pool)
    try:
        policy = LoaderPolicy(local_workers="threads", threads=threads, cpu_actors=0)
        with HybridLoader(src, recipe.imagenet_train(224), batch, device="cpu", policy=policy) as ld:
            it = iter(ld)
            next(it)  # start-up
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                try:
                    n += len(next(it)[0])
                except StopIteration:
                    it = iter(ld)
            return n / (time.perf_counter() - t0)
    finally:
        inprocess.DaemonPool = POOL


def measure_torch(args, src, env) -> tuple[list[str], dict]:
    pipelines = args.pipelines.split(",")
    default = HybridLoader(src, recipe.imagenet_train(args.size), args.batch_size, policy=LoaderPolicy(), device="cpu")
    doc = {"first_batch_s_default": h.first_batch_s(default), "runs": {}}
    lines = [
        "# The local lane: threads, worker processes and torch's DataLoader",
        "",
        f"First batch of HybridLoader(..., policy=LoaderPolicy()): {doc['first_batch_s_default']:.2f} s",
        "",
    ]
    for w in [int(x) for x in args.workers_list.split(",")]:
        for pipe in pipelines:
            results, ratios = compare(src, args, w, pipe)
            doc["runs"][f"workers={w},{pipe}"] = {"contestants": results, "ratios": ratios}
            lines += [
                f"## {pipe}, {w} worker(s), batch {args.batch_size}, {args.n} photos",
                "",
                *h.results_table(results),
                "",
                *h.ratio_table(ratios),
                "",
            ]
    return lines, doc


def measure_threads(args, src, env) -> tuple[list[str], dict]:
    names = [(t, own) for t in (1, 2) for own in (False, True)]
    got: dict = {k: [] for k in names}
    for _ in range(args.rounds):
        for t, own in names:
            got[(t, own)].append(thread_rate(src, t, own, args.seconds, args.batch_size))
    med = {k: statistics.median(v) for k, v in got.items()}
    rows = [
        [str(t), "one intra-op thread each" if own else "the shared intra-op threads", f"{m:.0f}"]
        + [" / ".join(f"{r:.0f}" for r in got[(t, own)])]
        for (t, own), m in med.items()
    ]
    lines = [
        f"## bench_local_lanes --measure threads: torch {torch.__version__}, {torch.get_num_threads()} intra-op "
        f"threads in the trainer; {args.rounds} rounds of {args.seconds:g} s, batch {args.batch_size}",
        "",
        *h.markdown_table(["lane threads", "torch ops on", "median images/s", "rounds"], rows),
        "",
        f"- one own / two shared (the lane): {med[(1, True)] / med[(2, False)]:.2f}x; own / shared: 1 lane thread "
        f"{med[(1, True)] / med[(1, False)]:.2f}x, 2 lane threads {med[(2, True)] / med[(2, False)]:.2f}x",
        "",
    ]
    return lines, {"images_per_s": {f"{t} threads, {'own' if own else 'shared'}": v for (t, own), v in got.items()}}


MEASURES = {"torch": measure_torch, "threads": measure_threads}


def main(argv=None) -> dict:
    ap = parser(
        __doc__,
        quick={"n": 64, "rounds": 1, "warmup_rounds": 0, "workers_list": "1", "pipelines": "uint8", "seconds": 1.0},
        n=256,
        rounds=3,
        batch_size=32,
        size=224,
    )
    ap.add_argument("--measure", choices=MEASURES, default="torch", help="what to measure (see the docstring)")
    ap.add_argument("--workers-list", default="1,2", help="torch: the worker counts to compare, comma-separated")
    ap.add_argument("--pipelines", default="uint8,normalized", help=f"torch: any of {', '.join(PIPELINES)}")
    ap.add_argument("--seconds", type=float, default=4.0, help="threads: seconds each contestant runs per round")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.pipelines.split(",")) - set(PIPELINES))
    if unknown:
        ap.error(f"--pipelines: unknown {', '.join(unknown)}; write any of {', '.join(PIPELINES)}")
    _folder, src = photo_source(args.root, args.n)
    env = h.environment()
    lines, doc = MEASURES[args.measure](args, src, env)
    doc = {"benchmark": "bench_local_lanes", "measure": args.measure, "environment": env, **doc}
    h.emit([*lines, h.environment_line(env)], args, dict(doc))
    return doc


if __name__ == "__main__":
    main()
