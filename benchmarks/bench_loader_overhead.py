#!/usr/bin/env python
"""What HybridLoader's machinery (scheduler, ordered merger, window, stats) costs over running
the kernels directly.

Both process the same batches (``sharding.rank_batches``, shuffled, seed 0) with T threads,
``--epochs-per-round`` epochs per round (method: _harness.py): ``raw``, a ThreadPoolExecutor(T)
mapping ``process_batch`` (a CPU lane's batch job), consumed in order; ``loader``, ``HybridLoader(source, recipe,
B, policy=LoaderPolicy(cpu_actors=0, threads=T), seed=0)``, created once. An untimed epoch checks
both deliver identical batches; ``stats()["stall_s"]`` is reported. Goal: loader / raw >= 0.95.
``--trace`` adds ``loader+trace``, a second such loader with ``loader.trace(path)`` recording over
each of its runs (the file written inside the run's time): the cost of a trace when on beside
the loader without one. Goal: loader+trace / loader >= 0.97 (a trace costs at most 3%).
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path

import torch

import _harness as h
from _contestants import KernelBatches, Loader, TracedLoader, max_abs_diff
from _data import parser, photo_source
from hybridload import LoaderPolicy, recipe

log = logging.getLogger("bench_loader_overhead")
GOALS = {"loader / raw": 0.95, "loader+trace / loader": 0.97}


def tracer_us_per_batch(path: str, batches: int = 5000) -> float:
    """The trace's own work per batch, in microseconds of CPU (one thread, no contention to share):
    what the dispatcher's and the trainer's threads add for each batch while a trace records (its
    spans, lane and merger tracks, the stall and two delivery spans), the file's write included."""
    import time

    from hybridload._batch_result import BatchResult
    from hybridload.execution._trace import Tracer

    tracer = Tracer(path)
    result = BatchResult(None, None, None, seconds=0.01, worker="w", read_seconds=0.002)  # type: ignore[arg-type]
    t0 = time.thread_time()
    for seq in range(batches):
        now = time.perf_counter()
        tracer.batch(seq, "inprocess", now - 0.02, now, result, True)
        tracer.taken(seq, now, now + 1e-4)
        tracer.trainer_span("hybridload.to_device", now, now + 1e-4)
        tracer.trainer_span("hybridload.batch_transform", now, now + 1e-4)
    tracer.write()
    return (time.thread_time() - t0) / batches * 1e6


def main(argv=None) -> int:
    ap = parser(__doc__, quick=dict(n=128, batch_size=32, rounds=1, warmup_rounds=0), size=224, torch_threads=1)
    ap.add_argument("--epochs-per-round", type=int, default=1, help="epochs each contestant runs per round")
    ap.add_argument("--threads", "-T", type=int, default=2, help="threads of both contestants")
    ap.add_argument("--batch-size", "-B", type=int, default=64, help="batch size")
    ap.add_argument(
        "--device",
        default="cpu",
        help="the loader's device; cpu keeps it like-for-like with the raw loop (no host-to-device copy)",
    )
    ap.add_argument("--trace", action="store_true", help="add loader+trace: the loader with loader.trace(path) on")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    folder, source = photo_source(args.root, args.n, log)
    rec = recipe.imagenet_train(args.size)
    env = h.environment()
    T, B, E = args.threads, args.batch_size, args.epochs_per_round
    cs = []
    tmp = tempfile.TemporaryDirectory()
    try:
        cs.append(KernelBatches("raw", source, rec, B, threads=T, epochs=E, pooled=True))
        cs.append(Loader("loader", source, rec, B, LoaderPolicy(cpu_actors=0, threads=T), T, args.device, epochs=E))
        if args.trace:
            policy, trace_path = LoaderPolicy(cpu_actors=0, threads=T), str(Path(tmp.name) / "run.json")
            cs.append(TracedLoader("loader+trace", source, rec, B, policy, T, args.device, E, trace_path=trace_path))
        if max_abs_diff(cs[0], cs[1], 30_000) != 0:
            raise RuntimeError("the raw kernel loop and the loader delivered different batches")
        log.info("check: raw loop and loader delivered the same batches")
        per_round = h.run_rounds(cs, args.rounds, args.warmup_rounds, expect=args.n * E, log=log)
        stall_total = cs[1].loader.stats()["stall_s"]
    finally:
        h.close_all(cs, log)
    traced_us = tracer_us_per_batch(str(Path(tmp.name) / "cost.json")) if args.trace else None
    results = h.summarize_all(per_round, cs)
    ratios = {"loader / raw": h.ratio(results, "loader", "raw")}
    if args.trace:
        ratios["loader+trace / loader"] = h.ratio(results, "loader+trace", "loader")
        # per CPU-second: what a shared machine's other load leaves comparable
        ratios["loader+trace / loader, per CPU-s"] = h.ratio(results, "loader+trace", "loader", "images_per_cpu_s")
    stall = [r["stall_s"] for r in per_round["loader"]]
    wall = sum(r["wall_s"] for r in per_round["loader"])
    lines = [
        f"## bench_loader_overhead: {args.n} photo JPEGs, T={T} threads, B={B}, {args.rounds} interleaved rounds "
        f"x {E} epoch(s), after {args.warmup_rounds} untimed\n",
        h.environment_line(env),
        *h.results_table(results, ("median", "min", "max", "cpu", "other", "contended")),
        "",
        h.CONTENTION_NOTE,
        "",
        *h.ratio_table(ratios, GOALS),
        "",
        f"- loader stats()['stall_s']: {stall_total:.2f} s in all (warm-up included), {sum(stall):.2f} s over the "
        f"timed epochs = {sum(stall) / wall:.0%} of the loader's timed wall time (the consumer does no work, so it "
        "waits on nearly everything)",
        "",
    ]
    tmp.cleanup()
    if traced_us is not None:
        per_batch_us = 1e6 * B / results["loader"]["median_images_per_s"] if results.get("loader") else float("nan")
        lines += [
            f"- a trace's own work: {traced_us:.0f} us of CPU per batch (Tracer calls and the file's write, "
            f"5,000 batches timed on one thread), {traced_us / per_batch_us:.2%} of the loader's median time per "
            f"batch here ({per_batch_us / 1e3:.0f} ms at B={B})",
            "",
        ]
    h.emit(
        lines,
        args,
        {
            "benchmark": "bench_loader_overhead",
            "dataset": str(folder),
            "environment": env,
            "contestants": results,
            "ratios": ratios,
            "goals": h.goals_met(ratios, GOALS),
            "loader_stall_s": {"total": stall_total, "timed": sum(stall), "per_round": stall},
            "trace_us_per_batch": traced_us,
        },
        log,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
