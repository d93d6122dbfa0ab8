#!/usr/bin/env python
"""HybridLoader's Ray lane against torch's DataLoader, Ray Data, DALI and the raw kernels.

peers.py's contest (``peers.run_contest``: same JPEGs and cores, ``imagenet_train(224)``, batch
64, ``--workers 2``, Ray embedded on 127.0.0.1 with 2 x workers logical CPUs; method: _harness.py)
over ``hybridload`` (its Ray lane alone), ``torch-dataloader``, ``ray-data``, ``dali``,
``raw-kernels`` (``process_batch``, a CPU lane's batch job, on one thread: times the usable cores, the ideal) and
``raw-kernels-pool`` (the same on a ThreadPoolExecutor(2)). Goals (ratios of medians):
hybridload / torch DataLoader >= 1.5; / Ray Data >= 1.5; / (raw kernels x cores) >= 0.9.
"""

from __future__ import annotations

import logging
import sys

import _harness as h
import peers
from _data import parser

log = logging.getLogger("bench_ray_lane")
GOALS = {"hybridload / torch DataLoader": 1.5, "hybridload / Ray Data": 1.5, "hybridload / (raw kernels x cores)": 0.9}
CONTESTANTS = ("hybridload", "torch-dataloader", "ray-data", "dali", "raw-kernels", "raw-kernels-pool")


def main(argv=None) -> int:
    ap = parser(
        __doc__,
        quick=dict(n=128, rounds=1, warmup_rounds=0),
        contestants=CONTESTANTS,
        batch_size=64,
        size=224,
        workers=2,
        object_store_mb=1024,
    )
    args = ap.parse_args(argv)
    folder, env, results, skipped = peers.run_contest(args, log, size=args.size)
    B, cores = args.batch_size, h.usable_cpus()
    ideal = f"raw-kernels x {cores}"
    if "raw-kernels" in results:  # the ideal: one thread's rate on every usable core
        results[ideal] = h.summarize(
            [dict(r, images_per_s=r["images_per_s"] * cores) for r in results["raw-kernels"]["rounds"]], cores
        )
    ratios = {
        k: h.ratio(results, a, b)
        for k, a, b in (
            ("hybridload / torch DataLoader", "hybridload", "torch-dataloader"),
            ("hybridload / Ray Data", "hybridload", "ray-data"),
            ("hybridload / (raw kernels x cores)", "hybridload", ideal),
            ("hybridload / DALI (2 threads)", "hybridload", "dali"),
            ("hybridload / raw kernels thread pool", "hybridload", "raw-kernels-pool"),
            ("raw kernels thread pool / (raw kernels x cores)", "raw-kernels-pool", ideal),
            ("torch DataLoader / (raw kernels x cores)", "torch-dataloader", ideal),
            ("Ray Data / (raw kernels x cores)", "ray-data", ideal),
        )
    }
    lines = [
        f"## bench_ray_lane: {args.n} photo JPEGs, imagenet_train({args.size}), batch {B}, {args.rounds} "
        f"interleaved rounds (after {args.warmup_rounds} untimed)\n",
        h.environment_line(env),
        *h.results_table(
            results,
            (("workers", lambda r: r["threads"]), "median", "min", "max", "cpu", "other", "contended"),
            skipped=skipped,
        ),
        f"\n({ideal}: derived, one thread's rate times the usable cores.) {h.CONTENTION_NOTE}\n",
        *h.ratio_table(ratios, GOALS),
        "",
    ]
    h.emit(
        lines,
        args,
        {
            "benchmark": "bench_ray_lane",
            "dataset": str(folder),
            "environment": env,
            "contestants": results,
            "skipped": skipped,
            "ratios": ratios,
            "goals": h.goals_met(ratios, GOALS),
        },
        log,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
