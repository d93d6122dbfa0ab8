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

``--measure overhead``: the lane's own cost on one worker (issue 37): HybridLoader (batch
``-B``, RandomResizedCrop(224) + flip (always), uint8, no Normalize) against the bare kernel
loop (``kernels.process_sample`` over the same samples and epochs), in process CPU seconds per
image, with the process's minor page faults per image. Each round runs loop, loader, loop
(``--epochs-per-round`` passes each), so the box's load drift hits both alike; the overhead is
the loader's time less the mean of the two loops; medians over rounds; wall time per image,
loader over loop, too (a quiet machine only). With ``--local-workers processes`` the loader's
CPU and faults are the trainer process's own (the copy of each batch out of its shared-memory
slot, the dispatch), the worker's kernel time is not in them.

``--measure threads``: the in-process lane's threads against the trainer's intra-op thread
pool: "own" (one intra-op thread each, ``lanes/local/inprocess.one_intraop_thread``) or
"shared" (the process's intra-op threads, with the trainer's), at 1 and 2 lane threads, each
run for ``--seconds``; the lane takes "own" for one thread and "shared" for more.

    python benchmarks/bench_local_lanes.py --n 256 --workers-list 1,2 --rounds 3
    python benchmarks/bench_local_lanes.py --measure overhead --n 256 --rounds 5 [--local-workers processes]
    python benchmarks/bench_local_lanes.py --measure threads --n 256 --rounds 3 --seconds 4
"""

from __future__ import annotations

import resource
import statistics
import time

import torch

import _harness as h
from _contestants import Loader
from _peer_loaders import TorchPil
from _data import parser, photo_source
from hybridload import HybridLoader, LoaderPolicy, kernels, recipe
from hybridload.lanes.local import inprocess


PIPELINES = {"uint8": False, "normalized": True}  # whether the batches are normalized
KINDS = ("threads", "processes")


def first_batch_s(src, rec, bs) -> float:
    t0 = time.perf_counter()
    with HybridLoader(src, rec, bs, policy=LoaderPolicy(), device="cpu") as ld:
        next(iter(ld))
        return time.perf_counter() - t0


def compare(src, args, w: int, pipeline: str) -> tuple[dict, dict]:
    """One pipeline at ``w`` workers: threads, processes and torch's DataLoader, interleaved.
    Returns (summaries by contestant, ratios)."""
    normalize = PIPELINES[pipeline]
    rec = recipe.imagenet_train(args.size, normalize=normalize)
    contestants = [
        Loader(k, src, rec, args.batch_size, LoaderPolicy(threads=w, local_workers=k), threads=w) for k in KINDS
    ]
    contestants.append(TorchPil("torch", src, rec, args.batch_size, w, normalize=normalize))
    results = h.set_up_and_run(contestants, args.rounds, args.warmup_rounds, label=f"[{pipeline}, {w} workers] ")
    ratios = {
        "threads / torch": h.ratio(results, "threads", "torch"),
        "processes / torch": h.ratio(results, "processes", "torch"),
        "processes / threads": h.ratio(results, "processes", "threads"),
    }
    return results, ratios


def _cpu_faults() -> tuple[float, int, float]:
    return time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()


def measure(args) -> dict:
    """This process's package: per round, CPU ms and faults per image of the loop and the loader."""
    torch.set_num_threads(1)
    _, src = photo_source(args.root, args.n)
    rec = recipe.Recipe([recipe.Decode(), recipe.RandomResizedCrop(224), recipe.HorizontalFlip(1.0)])
    n, E = len(src), args.epochs_per_round
    policy = LoaderPolicy(mode="cpu", cpu_actors=0, threads=1, local_workers=args.local_workers)
    per: dict[str, list[float]] = {
        k: [] for k in ("loop", "loader", "loop_faults", "loader_faults", "loop_wall", "loader_wall")
    }

    def loop(epoch0: int) -> tuple[float, float, float]:
        t0, f0, w0 = _cpu_faults()
        for epoch in range(epoch0, epoch0 + E):
            for i in range(n):
                kernels.process_sample(src, rec, i, seed=0, epoch=epoch)
        t1, f1, w1 = _cpu_faults()
        return (t1 - t0) / (n * E), (f1 - f0) / (n * E), (w1 - w0) / (n * E)

    with HybridLoader(src, rec, args.batch_size, shuffle=False, device="cpu", seed=0, policy=policy) as ld:

        def loader(epoch0: int) -> tuple[float, float, float]:
            t0, f0, w0 = _cpu_faults()
            for epoch in range(epoch0, epoch0 + E):
                ld.set_epoch(epoch)
                for _ in ld:
                    pass
            t1, f1, w1 = _cpu_faults()
            return (t1 - t0) / (n * E), (f1 - f0) / (n * E), (w1 - w0) / (n * E)

        for r in range(args.warmup_rounds + args.rounds):
            epoch0 = 1 + r * E
            a, fa, wa = loop(epoch0)
            b, fb, wb = loader(epoch0)
            c, fc, wc = loop(epoch0)
            if r >= args.warmup_rounds:
                per["loop"].append((a + c) / 2)
                per["loader"].append(b)
                per["loop_faults"].append((fa + fc) / 2)
                per["loader_faults"].append(fb)
                per["loop_wall"].append((wa + wc) / 2)
                per["loader_wall"].append(wb)
    over = [ld_ - lp for ld_, lp in zip(per["loader"], per["loop"])]
    wall = [w / lw for w, lw in zip(per["loader_wall"], per["loop_wall"])]
    return {
        "loop_ms": 1e3 * statistics.median(per["loop"]),
        "loader_ms": 1e3 * statistics.median(per["loader"]),
        "overhead_ms": 1e3 * statistics.median(over),
        "overhead_frac": statistics.median(o / lp for o, lp in zip(over, per["loop"])),
        "loop_faults": statistics.median(per["loop_faults"]),
        "loader_faults": statistics.median(per["loader_faults"]),
        "wall_ratio": statistics.median(wall),
        "rounds": per,
    }


def _row(label: str, runs: list[dict]) -> list[str]:
    def med(k: str) -> float:
        return statistics.median(r[k] for r in runs)

    return [
        label,
        f"{med('loop_ms'):.3f}",
        f"{med('loader_ms'):.3f}",
        f"{med('overhead_ms'):.3f}",
        f"{100 * med('overhead_frac'):.1f}%",
        f"{med('loop_faults'):.1f}",
        f"{med('loader_faults'):.1f}",
        f"{med('wall_ratio'):.3f}",
    ]


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
    doc = {"first_batch_s_default": first_batch_s(src, recipe.imagenet_train(args.size), args.batch_size), "runs": {}}
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


def measure_overhead(args, src, env) -> tuple[list[str], dict]:
    result = measure(args)
    lane = "in-process lane, 1 thread" if args.local_workers == "threads" else "process lane, 1 worker"
    header = ["kernel loop CPU ms/img", "loader CPU ms/img", "lane overhead ms/img", "overhead / kernel"]
    header += ["loop faults/img", "loader faults/img", "loader / loop wall time"]
    rows = [_row("this tree", [result])]
    lines = [
        f"## bench_local_lanes --measure overhead: {args.n} photo JPEGs, {lane}, B={args.batch_size}, "
        f"RandomResizedCrop(224) + flip uint8, {args.rounds} rounds x {args.epochs_per_round} passes",
        "",
        *h.markdown_table(["tree", *header], rows),
        "",
    ]
    return lines, {"rows": rows, "result": result}


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


MEASURES = {"torch": measure_torch, "overhead": measure_overhead, "threads": measure_threads}


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
    ap.add_argument("--epochs-per-round", type=int, default=2, help="overhead: passes of each side per round")
    ap.add_argument(
        "--local-workers", choices=KINDS, default="threads", help="overhead: the loader's lane, 1 thread or 1 process"
    )
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
