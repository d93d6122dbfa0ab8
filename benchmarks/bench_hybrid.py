#!/usr/bin/env python
"""The GPU lane (DALI, here in CPU-only mode) and the CPU lane together against each alone.

Part 1 (method: _harness.py): each round runs every contestant over the same epoch; all are
``HybridLoader(source, imagenet_train(224), 64, policy=..., device="cpu")``, created once:
``gpu``: ``LoaderPolicy(mode="gpu", gpu_threads=2)`` (DALI); ``cpu``: ``LoaderPolicy(mode="cpu",
cpu_actors=0, threads=2)``; ``split s T/G``: ``LoaderPolicy(mode="split", gpu_share=s, cpu_actors=0,
threads=T, gpu_threads=G)`` per share s (``--shares``) and T/G (``--thread-splits``). Reported:
images/s and realized GPU share, the best split, best split / better single lane (goal >= 1.0;
per-round paired ratio too, since the best of many noisy medians favours the splits).

Part 2, the GPU lane's overhead: the ``gpu`` loader against its GPU lane alone (``DaliLane``'s
``run_batch`` in a loop on one thread), over the same batches. Goal: loader / standalone >= 0.95.
DALI's CPU-only mode stands in for the GPU, so both lanes share cores.
"""

from __future__ import annotations

import logging
import sys

import numpy as np
import torch

import _harness as h
from _contestants import KernelBatches, Loader, max_abs_diff
from _data import parser, photo_source
from hybridload import LoaderPolicy, recipe
from hybridload.lanes._base import BatchTask
from hybridload.lanes._gpu.dali import DaliLane

log = logging.getLogger("bench_hybrid")
GOAL_SPLIT = 1.0
GOALS2 = {"loader GPU lane / standalone DALI loop": 0.95}


class StandaloneDali(KernelBatches):
    """The GPU lane on its own: ``DaliLane.run_batch`` over the epoch's batches in a loop on this
    thread, without the loader's dispatcher and merger (``threads``: DALI's)."""

    def __init__(self, source, rec, batch_size: int, threads: int):
        super().__init__("dali-standalone", source, rec, batch_size)
        self.threads = threads
        self.lane = DaliLane(source, rec, batch_size=batch_size, device=torch.device("cpu"), gpu_threads=threads)

    def one(self, indices: np.ndarray, epoch: int) -> tuple:
        r = self.lane.run_batch(BatchTask(0, epoch, indices))
        return r.images, r.labels

    def close(self) -> None:
        self.lane.close()


def split_summary(res: dict, splits: list, rounds: int) -> dict:
    """The better single lane, the best split (overall and per T/G) and their ratios."""
    single = {k: res[k]["median_images_per_s"] for k in ("gpu", "cpu")}
    better = max(single, key=single.get)
    cands = {k: v for k, v in res.items() if k.startswith("split")}
    best = max(cands, key=lambda k: cands[k]["median_images_per_s"])
    r = h.ratio(res, best, better)
    per_round = [
        max(v["rounds"][k]["images_per_s"] for v in cands.values())
        / max(res[x]["rounds"][k]["images_per_s"] for x in single)
        for k in range(rounds)
    ]
    by_split = {}
    for tag in (f"{t}/{g}" for t, g in splits):
        kb = max((k for k in cands if cands[k]["split"] == tag), key=lambda k: cands[k]["median_images_per_s"])
        by_split[tag] = {
            "best": kb,
            "share": cands[kb]["policy_share"],
            "images_per_s": cands[kb]["median_images_per_s"],
            "over_better_single": cands[kb]["median_images_per_s"] / single[better],
        }
    return {
        "single": single,
        "better_single": better,
        "best_split": best,
        "best_over_better_single": r,
        "per_round_best_over_better_single": per_round,
        "by_thread_split": by_split,
        "goal": {"min": GOAL_SPLIT, "met": r["of_medians"] >= GOAL_SPLIT},
    }


def main(argv=None) -> int:
    ap = parser(
        __doc__,
        rounds=3,
        quick=dict(n=64, shares="0.5", thread_splits="1/1", rounds=1, overhead_rounds=1, warmup_rounds=0),
        batch_size=64,
        size=224,
        gpu_threads=2,
    )
    ap.add_argument("--overhead-rounds", type=int, default=5, help="interleaved rounds of part 2")
    ap.add_argument("--threads", type=int, default=2, help="threads of the CPU-lane-only contestant")
    ap.add_argument("--shares", default="0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9", help="GPU shares of the splits")
    ap.add_argument(
        "--thread-splits", default="1/1,2/2", help="T/G pairs for the splits: in-process lane threads / DALI threads"
    )
    args = ap.parse_args(argv)
    shares = [float(s) for s in args.shares.split(",") if s.strip()]
    splits = [tuple(int(x) for x in p.split("/")) for p in args.thread_splits.split(",") if p.strip()]
    if not all(0 < s < 1 for s in shares) or not all(len(p) == 2 and min(p) > 0 for p in splits):
        ap.error("--shares must be in (0, 1), --thread-splits T/G with T, G >= 1")
    torch.set_num_threads(1)
    folder, source = photo_source(args.root, args.n, log)
    rec, B = recipe.imagenet_train(args.size), args.batch_size
    import nvidia.dali as dali  # the GPU lane

    env = h.environment(dali=dali.__version__)
    T, G = args.threads, args.gpu_threads
    lanes = [
        ("gpu", LoaderPolicy(mode="gpu", gpu_threads=G), 0, G, 1.0),
        ("cpu", LoaderPolicy(mode="cpu", cpu_actors=0, threads=T), T, 0, 0.0),
    ]
    lanes += [
        (
            f"split {s:.2f} {t}/{g}",
            LoaderPolicy(mode="split", gpu_share=s, cpu_actors=0, threads=t, gpu_threads=g),
            t,
            g,
            s,
        )
        for t, g in splits
        for s in shares
    ]
    cs = []
    try:
        for name, policy, t, g, _share in lanes:
            cs.append(Loader(name, source, rec, B, policy, t + g))
        gpu, alone = cs[0], StandaloneDali(source, rec, B, G)
        cs.append(alone)
        diff = max_abs_diff(gpu, alone, 999)
        log.info("check: the GPU-lane loader and the standalone DALI loop agree (max abs pixel diff %g)", diff)
        part1 = h.run_rounds(
            cs[:-1],
            args.rounds,
            args.warmup_rounds,
            epoch=lambda r: r if r >= 0 else 1000 + r,
            expect=args.n,
            log=log,
            label="part 1 ",
        )
        part2 = h.run_rounds(
            [gpu, alone],
            args.overhead_rounds,
            1,
            epoch=lambda r: 100 + (r if r >= 0 else 1000 + r),
            expect=args.n,
            log=log,
            label="part 2 ",
        )
    finally:
        h.close_all(cs, log)
    res1 = h.summarize_all(part1, cs)
    for name, _policy, t, g, share in lanes:
        res1[name].update(
            policy_share=share,
            split=f"{t}/{g}",
            median_gpu_share=float(np.median([r["lane_share"].get("gpu", 0.0) for r in part1[name]])),
        )
    summary1 = split_summary(res1, splits, args.rounds)
    res2 = h.summarize_all(part2, cs)
    ratios2 = {"loader GPU lane / standalone DALI loop": h.ratio(res2, "gpu", "dali-standalone")}
    s1, best = summary1, summary1["best_split"]
    br, single = s1["best_over_better_single"], s1["single"]
    lines = [
        f"## bench_hybrid: {args.n} photo JPEGs, imagenet_train({args.size}), batch {B}, GPU lane = DALI "
        f"{env['dali']} CPU-only mode\n",
        h.environment_line(env),
        f"### Part 1: lanes alone and split ({args.rounds} interleaved rounds after {args.warmup_rounds} "
        "untimed; one epoch each per round)\n",
        *h.results_table(
            res1,
            (
                ("GPU share cap", lambda r: f"{r['policy_share']:.2f}"),
                ("threads T/G", lambda r: r["split"]),
                ("realized GPU share", lambda r: f"{r['median_gpu_share']:.2f}"),
                *("median", "min", "max", "cpu", "other", "contended"),
            ),
        ),
        "",
        h.CONTENTION_NOTE,
        "",
        f"- better single lane: **{s1['better_single']}** ({single[s1['better_single']]:.0f} img/s; "
        f"gpu {single['gpu']:.0f}, cpu {single['cpu']:.0f})",
        f"- best split: **{best}** {res1[best]['median_images_per_s']:.0f} img/s",
        f"- best split / better single lane: **{br['of_medians']:.3f}x** (ratio of medians; paired per round "
        f"{br['paired_median']:.3f}x, range {br['paired_min']:.3f}-{br['paired_max']:.3f}; each round's best "
        f"split over its better single lane: {', '.join(f'{x:.3f}' for x in s1['per_round_best_over_better_single'])})",
        f"- goal best split / better single lane >= {GOAL_SPLIT}: " + ("met" if s1["goal"]["met"] else "**NOT met**"),
        *(
            f"- best at T/G {tag}: share {b['share']:.2f}, {b['images_per_s']:.0f} img/s = "
            f"{b['over_better_single']:.3f}x the better single lane"
            for tag, b in s1["by_thread_split"].items()
        ),
        "",
    ]
    lines += [
        f"### Part 2: GPU lane overhead ({args.overhead_rounds} interleaved rounds after 1 untimed)\n",
        *h.results_table(res2, ("median", "min", "max", "cpu", "other")),
        "",
        *h.ratio_table(ratios2, GOALS2),
        "",
        f"Same pixels: max abs diff {diff:g}.",
        "",
    ]
    h.emit(
        lines,
        args,
        {
            "benchmark": "bench_hybrid",
            "dataset": str(folder),
            "environment": env,
            "part1": {"contestants": res1, "summary": summary1},
            "part2": {
                "contestants": res2,
                "ratios": ratios2,
                "goals": h.goals_met(ratios2, GOALS2),
                "max_abs_pixel_diff": diff,
            },
        },
        log,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
