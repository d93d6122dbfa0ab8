#!/usr/bin/env python
"""The GPU lane (DALI, here in CPU-only mode) and the CPU lane together against each alone.

Part 1, side by side in one process, interleaved: every round runs each contestant over
one epoch of the photo set (the same epoch, so the same batches, for all; who goes first
rotates), after an untimed warm-up round; the report gives the median images/s over the
rounds. All are ``HybridLoader(source, imagenet_train(224), 64, policy=..., device="cpu")``,
created once and kept across rounds:

* ``gpu``: ``LoaderPolicy(mode="gpu")`` (DALI, ``gpu_threads=2``);
* ``cpu``: ``LoaderPolicy(mode="cpu", cpu_actors=0, threads=2)`` (in-process kernels);
* ``split s T/G``: ``LoaderPolicy(mode="split", gpu_share=s, cpu_actors=0, threads=T,
  gpu_threads=G)`` for each share s (default 0.1 .. 0.9) and thread split T/G
  (default 1/1 and 2/2).

Reported: images/s per contestant, the GPU lane's realized share of the batches, the best
split and its share, and best split / better single lane (goal >= 1.0). Taking the best
of many noisy medians favours the splits a little; the per-round paired ratio is given
too.

Part 2, the GPU lane's overhead: the ``gpu`` loader against the same DALI pipeline run
standalone, ``hybridload.pipelines.build_pipeline(rec, batch_size=64, device_id=None,
num_threads=2)`` fed in a loop as ``DaliLane._run`` does (read the bytes, image_size,
recipe.sample_params -> chain_params, feed_input, run, copy the output into a torch
tensor), over the same batches (``sharding.rank_batches`` of the epoch). Interleaved
pairs, ``--overhead-rounds`` of them. Goal: loader / standalone >= 0.95.

On this machine DALI's CPU-only mode stands in for the GPU, so both lanes compete for the
same cores; a real GPU lane would add capacity instead of sharing it.

Run:  python benchmarks/bench_hybrid.py [--n 1024] [--rounds 3] [--out bench-hybrid.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from hybridload import HybridLoader, LoaderPolicy, recipe, sharding, sources

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (DEFAULT_PHOTO_ROOT, OTHER_LOAD_WARN, fmt, photo_source, ratio, rotate,  # noqa: E402
                     setup_logging, summarize, timed, usable_cpus)

log = logging.getLogger("bench_hybrid")

GOAL_SPLIT_OVER_BEST_SINGLE = 1.0
GOAL_LANE_OVER_STANDALONE = 0.95


def rss_mb() -> float:
    try:
        with open(f"/proc/{os.getpid()}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except (OSError, ValueError):
        return float("nan")


class LoaderContestant:
    def __init__(self, name: str, source, rec, batch_size: int, policy: LoaderPolicy, workers: int,
                 share: float | None = None, split: str | None = None):
        self.name, self.policy, self.workers, self.share, self.split = name, policy, workers, share, split
        self.loader = HybridLoader(source, rec, batch_size, policy=policy, seed=0, device="cpu")
        self.gpu_shares: list[float] = []

    def _lane_images(self) -> dict:
        return {k: v["images"] for k, v in self.loader.stats()["lanes"].items()}

    def epoch(self, epoch: int) -> int:
        before = self._lane_images()
        self.loader.set_epoch(epoch)
        n = sum(images.shape[0] for images, _labels in self.loader)
        after = self._lane_images()
        done = {k: after[k] - before.get(k, 0) for k in after}
        total = sum(done.values())
        self.last_gpu_share = done.get("gpu", 0) / total if total else 0.0
        return n

    def close(self) -> None:
        self.loader.close()


class StandaloneDali:
    """The GPU lane's DALI pipeline driven directly, as DaliLane._run drives it."""

    name = "dali-standalone"
    workers = 2

    def __init__(self, source, rec, batch_size: int, threads: int, seed: int = 0):
        from hybridload.pipelines import build_pipeline, used_inputs
        self.source, self.rec, self.batch_size, self.seed = source, rec, batch_size, seed
        self.workers = threads
        self.inputs = used_inputs(rec)
        self.pipe = build_pipeline(rec, batch_size=batch_size, device_id=None, num_threads=threads, seed=seed)

    def _batch(self, idx: np.ndarray, epoch: int) -> torch.Tensor:
        from hybridload.kernels import image_size
        from hybridload.pipelines import chain_params
        src, rec = self.source, self.rec
        encoded, params, labels = [], [], np.empty(len(idx), np.int64)
        for k, i in enumerate(idx.tolist()):
            payload, labels[k] = src.read(src.ref(i))
            w, h = image_size(payload)
            params.append(chain_params(rec.sample_params(self.seed, epoch, i, w, h), w, h))
            encoded.append(np.frombuffer(payload, np.uint8))
        self.pipe.feed_input("encoded", encoded)
        for name in self.inputs[1:]:
            self.pipe.feed_input(name, [getattr(p, name) for p in params])
        (out,) = self.pipe.run()
        return torch.from_dlpack(out.as_tensor()).clone()  # DALI reuses its buffers: take a copy

    def epoch(self, epoch: int) -> int:
        n = 0
        for idx in sharding.rank_batches(len(self.source), batch_size=self.batch_size, seed=self.seed,
                                         epoch=epoch, shuffle=True):
            n += self._batch(idx, epoch).shape[0]
        return n

    def close(self) -> None:
        self.pipe = None


def check_same(lane: LoaderContestant, alone: StandaloneDali, epoch: int) -> float:
    """Untimed: the loader's GPU lane and the standalone loop cut the same images (max abs diff)."""
    lane.loader.set_epoch(epoch)
    got = [images for images, _labels in lane.loader]
    want = [alone._batch(idx, epoch) for idx in sharding.rank_batches(len(alone.source), batch_size=alone.batch_size,
                                                                       seed=0, epoch=epoch, shuffle=True)]
    if len(got) != len(want) or any(a.shape != b.shape for a, b in zip(got, want)):
        raise RuntimeError("the GPU-lane loader and the standalone DALI loop delivered different batch shapes")
    return max(float((a.int() - b.int()).abs().max()) for a, b in zip(got, want))


def run_rounds(contestants, rounds: int, warmup: int, n: int, label: str, epoch0: int = 0) -> dict:
    per_round = {c.name: [] for c in contestants}
    for rnd in range(-warmup, rounds):
        epoch = epoch0 + (1000 + rnd if rnd < 0 else rnd)
        for c in rotate(contestants, rnd):
            r = timed(c.epoch, epoch)
            if rnd < 0:
                log.info("%s warm-up   %-16s %7.0f img/s (discarded)", label, c.name, r["images_per_s"])
                continue
            if r["images"] != n:
                raise RuntimeError(f"{c.name} delivered {r['images']} images, expected {n}")
            if hasattr(c, "last_gpu_share"):
                r["gpu_share"] = c.last_gpu_share
            per_round[c.name].append(r)
            log.info("%s round %d/%d  %-16s %7.0f img/s  (CPU util %.2f, other load %s%s)", label, rnd + 1, rounds,
                     c.name, r["images_per_s"], r["cpu_util"], fmt(r["other_load"], ".2f"),
                     f", GPU share {r['gpu_share']:.2f}" if "gpu_share" in r else "")
    return per_round


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--root", type=Path, default=DEFAULT_PHOTO_ROOT,
                    help="where photo sets live; the set of N images is ROOT/nN (generated on first use)")
    ap.add_argument("--n", type=int, default=1024, help="number of images (one epoch per contestant per round)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of part 1 (median reported)")
    ap.add_argument("--warmup-rounds", type=int, default=1, help="untimed rounds before the timed ones")
    ap.add_argument("--overhead-rounds", type=int, default=5, help="interleaved rounds of part 2")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--size", type=int, default=224, help="output size of imagenet_train")
    ap.add_argument("--threads", type=int, default=2, help="threads of the CPU-lane-only contestant")
    ap.add_argument("--gpu-threads", type=int, default=2, help="DALI threads of the GPU-lane-only contestant")
    ap.add_argument("--shares", default="0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9", help="GPU shares of the splits")
    ap.add_argument("--thread-splits", default="1/1,2/2",
                    help="T/G pairs for the splits: in-process lane threads / DALI threads")
    ap.add_argument("--no-split", action="store_true", help="run part 2 only")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    setup_logging()
    shares = [float(s) for s in args.shares.split(",") if s.strip()]
    splits = [tuple(int(x) for x in p.split("/")) for p in args.thread_splits.split(",") if p.strip()]
    if min(args.n, args.rounds, args.batch_size, args.overhead_rounds, args.threads, args.gpu_threads) <= 0 \
            or args.warmup_rounds < 0 or not all(0 < s < 1 for s in shares) \
            or not all(len(p) == 2 and min(p) > 0 for p in splits):
        ap.error("counts must be positive, shares in (0, 1), thread splits T/G with T, G >= 1")

    torch.set_num_threads(1)  # each kernel call resizes on one core; threads come from the lanes
    folder, source = photo_source(args.root, args.n, log)
    rec = recipe.imagenet_train(args.size)
    env = {"python": platform.python_version(), "torch": torch.__version__, "cpus": usable_cpus(),
           "loadavg_start": os.getloadavg()}
    try:
        import nvidia.dali as dali
        env["dali"] = dali.__version__
    except ImportError as exc:
        raise SystemExit(f"bench_hybrid needs DALI (the GPU lane): {exc}") from None

    t_start = time.perf_counter()
    B = args.batch_size
    contestants: list = []
    alone = None
    try:
        gpu = LoaderContestant("gpu", source, rec, B, LoaderPolicy(mode="gpu", gpu_threads=args.gpu_threads),
                               args.gpu_threads, share=1.0, split=f"0/{args.gpu_threads}")
        cpu = LoaderContestant("cpu", source, rec, B, LoaderPolicy(mode="cpu", cpu_actors=0, threads=args.threads),
                               args.threads, share=0.0, split=f"{args.threads}/0")
        contestants += [gpu, cpu]
        if not args.no_split:
            for t, g in splits:
                for s in shares:
                    pol = LoaderPolicy(mode="split", gpu_share=s, cpu_actors=0, threads=t, gpu_threads=g)
                    contestants.append(LoaderContestant(f"split {s:.2f} {t}/{g}", source, rec, B, pol, t + g,
                                                        share=s, split=f"{t}/{g}"))
        alone = StandaloneDali(source, rec, B, args.gpu_threads)
        diff = check_same(gpu, alone, 999)
        log.info("check: the GPU-lane loader and the standalone DALI loop agree (max abs pixel diff %g)", diff)

        part1 = {}
        if not args.no_split:
            log.info("part 1: %d loaders (RSS %.0f MB), %d untimed warm-up round(s) + %d timed rounds of %d images",
                     len(contestants), rss_mb(), args.warmup_rounds, args.rounds, args.n)
            part1 = run_rounds(contestants, args.rounds, args.warmup_rounds, args.n, "part 1")
            env["rss_mb_part1"] = rss_mb()
        t_mid = time.perf_counter()
        log.info("part 2: GPU-lane loader vs standalone DALI loop, %d interleaved rounds", args.overhead_rounds)
        part2 = run_rounds([gpu, alone], args.overhead_rounds, 1, args.n, "part 2", epoch0=100)
    finally:
        for c in contestants + ([alone] if alone is not None else []):
            c.close()
    env["loadavg_end"] = os.getloadavg()
    env["seconds"] = {"part1": t_mid - t_start, "part2": time.perf_counter() - t_mid}
    log.info("done in %.1f s", time.perf_counter() - t_start)

    # ---- part 1 summary
    res1 = {}
    for c in contestants:
        rounds = part1.get(c.name)
        if not rounds:
            continue
        s = summarize(rounds, c.workers)
        s.update(policy_share=c.share, split=c.split,
                 median_gpu_share=statistics.median(r.get("gpu_share", 0.0) for r in rounds))
        res1[c.name] = s
    single = {}
    best = None
    if res1:
        single = {k: res1[k]["median_images_per_s"] for k in ("gpu", "cpu")}
        better = max(single, key=single.get)
        splits_res = {k: v for k, v in res1.items() if k.startswith("split")}
        best = max(splits_res, key=lambda k: splits_res[k]["median_images_per_s"])
        best_ratio = ratio(res1, best, better)
        # per round: the best split of that round over the better single lane of that round
        per_round_best = []
        for k in range(args.rounds):
            b = max(v["rounds"][k]["images_per_s"] for v in splits_res.values())
            s = max(res1[x]["rounds"][k]["images_per_s"] for x in ("gpu", "cpu"))
            per_round_best.append(b / s)
        by_split = {}
        for t, g in splits:
            tag = f"{t}/{g}"
            cands = {k: v for k, v in splits_res.items() if v["split"] == tag}
            kb = max(cands, key=lambda k: cands[k]["median_images_per_s"])
            by_split[tag] = {"best": kb, "share": cands[kb]["policy_share"],
                             "images_per_s": cands[kb]["median_images_per_s"],
                             "over_better_single": cands[kb]["median_images_per_s"] / single[better]}
        summary1 = {"better_single": better, "best_split": best, "best_share": res1[best]["policy_share"],
                    "best_split_threads": res1[best]["split"], "best_over_better_single": best_ratio,
                    "per_round_best_over_better_single": per_round_best, "by_thread_split": by_split,
                    "goal": {"min": GOAL_SPLIT_OVER_BEST_SINGLE,
                             "met": best_ratio["of_medians"] >= GOAL_SPLIT_OVER_BEST_SINGLE}}
    else:
        summary1 = None

    # ---- part 2 summary
    res2 = {k: summarize(v, 2) for k, v in part2.items()}
    r2 = ratio(res2, "gpu", "dali-standalone")
    summary2 = {"lane_over_standalone": r2, "max_abs_pixel_diff": diff,
                "goal": {"min": GOAL_LANE_OVER_STANDALONE, "met": r2["of_medians"] >= GOAL_LANE_OVER_STANDALONE}}

    # ---- report
    out = [f"## bench_hybrid: {args.n} photo JPEGs, imagenet_train({args.size}), batch {B}, GPU lane = DALI "
           f"{env['dali']} CPU-only mode\n",
           f"Python {env['python']}, torch {env['torch']}; {env['cpus']} CPUs usable; load average "
           f"{env['loadavg_start'][0]:.2f} at start, {env['loadavg_end'][0]:.2f} at end.\n"]
    if res1:
        out += [f"### Part 1: lanes alone and split ({args.rounds} interleaved rounds after {args.warmup_rounds} "
                "untimed; one epoch each per round)\n",
                "| contestant | GPU share cap | threads T/G | realized GPU share | median img/s | min | max | "
                "CPU util | other load | contended |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for k, r in res1.items():
            mark = " **best**" if k == best else ""
            out.append(f"| {k}{mark} | {r['policy_share']:.2f} | {r['split']} | {r['median_gpu_share']:.2f} | "
                       f"{r['median_images_per_s']:.0f} | {r['min_images_per_s']:.0f} | {r['max_images_per_s']:.0f} | "
                       f"{r['median_cpu_util']:.2f} | {fmt(r['median_other_load'], '.2f')} | "
                       f"{r['contended_rounds']}/{len(r['rounds'])} |")
        br = summary1["best_over_better_single"]
        pr = summary1["per_round_best_over_better_single"]
        out += ["", "Other load: cores used by other processes meanwhile (/proc/stat); contended: rounds where "
                f"that exceeded the cores the contestant leaves free by {OTHER_LOAD_WARN}.\n",
                f"- better single lane: **{summary1['better_single']}** ({single[summary1['better_single']]:.0f} img/s; "
                f"gpu {single['gpu']:.0f}, cpu {single['cpu']:.0f})",
                f"- best split: **{best}** (share {summary1['best_share']:.2f}, T/G {summary1['best_split_threads']}) "
                f"{res1[best]['median_images_per_s']:.0f} img/s",
                f"- best split / better single lane: **{br['of_medians']:.3f}x** (ratio of medians; paired per round "
                f"{br['paired_median']:.3f}x, range {br['paired_min']:.3f}-{br['paired_max']:.3f}; each round's best "
                f"split over its better single lane: {', '.join(f'{x:.3f}' for x in pr)})",
                f"- goal best split / better single lane >= {GOAL_SPLIT_OVER_BEST_SINGLE}: "
                + ("met" if summary1["goal"]["met"] else "**NOT met**")]
        for tag, b in summary1["by_thread_split"].items():
            out.append(f"- best at T/G {tag}: share {b['share']:.2f}, {b['images_per_s']:.0f} img/s "
                       f"= {b['over_better_single']:.3f}x the better single lane")
        out.append("")
    out += [f"### Part 2: GPU lane overhead ({args.overhead_rounds} interleaved rounds after 1 untimed)\n",
            "| contestant | median img/s | min | max | CPU util | other load |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for k, r in res2.items():
        label = 'HybridLoader(mode="gpu")' if k == "gpu" else k
        out.append(f"| {label} | {r['median_images_per_s']:.0f} | "
                   f"{r['min_images_per_s']:.0f} | {r['max_images_per_s']:.0f} | {r['median_cpu_util']:.2f} | "
                   f"{fmt(r['median_other_load'], '.2f')} |")
    out += ["", f"- loader GPU lane / standalone DALI loop: **{r2['of_medians']:.3f}x** (ratio of medians; paired "
            f"per round {r2['paired_median']:.3f}x, range {r2['paired_min']:.3f}-{r2['paired_max']:.3f}); same "
            f"pixels (max abs diff {diff:g})",
            f"- goal >= {GOAL_LANE_OVER_STANDALONE}: " + ("met" if summary2["goal"]["met"] else "**NOT met**"), ""]
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()
    if args.out:
        doc = {"benchmark": "bench_hybrid",
               "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
               "dataset": str(folder), "environment": env, "part1": {"contestants": res1, "summary": summary1},
               "part2": {"contestants": res2, "summary": summary2}}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
