#!/usr/bin/env python
"""What HybridLoader's machinery (scheduler, ordered merger, window, stats) costs over running
the kernels directly.

Both process the same batches (``sharding.rank_batches``, shuffled, seed 0) with T threads,
``--epochs-per-round`` epochs per round (method: _harness.py): ``raw``, a ThreadPoolExecutor(T)
mapping ``process_batch`` (a CPU lane's batch job), consumed in order; ``loader``, ``HybridLoader(source, recipe,
B, policy=LoaderPolicy(cpu_actors=0, threads=T), seed=0)``, created once. An untimed epoch checks
both deliver identical batches; ``stats()["stall_s"]`` is reported. Goal: loader / raw >= 0.95.
"""

from __future__ import annotations

import logging
import sys

import torch

import _harness as h
from _contestants import KernelBatches, Loader, max_abs_diff
from _data import parser, photo_source
from hybridload import LoaderPolicy, recipe

log = logging.getLogger("bench_loader_overhead")
GOALS = {"loader / raw": 0.95}


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
    args = ap.parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    folder, source = photo_source(args.root, args.n, log)
    rec = recipe.imagenet_train(args.size)
    env = h.environment()
    T, B, E = args.threads, args.batch_size, args.epochs_per_round
    cs = []
    try:
        cs.append(KernelBatches("raw", source, rec, B, threads=T, epochs=E, pooled=True))
        cs.append(Loader("loader", source, rec, B, LoaderPolicy(cpu_actors=0, threads=T), T, args.device, epochs=E))
        if max_abs_diff(cs[0], cs[1], 30_000) != 0:
            raise RuntimeError("the raw kernel loop and the loader delivered different batches")
        log.info("check: raw loop and loader delivered the same batches")
        per_round = h.run_rounds(cs, args.rounds, args.warmup_rounds, expect=args.n * E, log=log)
        stall_total = cs[1].loader.stats()["stall_s"]
    finally:
        h.close_all(cs, log)
    results = h.summarize_all(per_round, cs)
    ratios = {"loader / raw": h.ratio(results, "loader", "raw")}
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
        },
        log,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
