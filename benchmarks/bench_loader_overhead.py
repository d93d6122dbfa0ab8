#!/usr/bin/env python
"""What HybridLoader's machinery (scheduler, ordered merger, window, stats) costs over
running the kernels directly.

Two contestants process exactly the same batches (``sharding.rank_batches`` of the
epoch, shuffled, seed 0) with the same number of threads T, interleaved over rounds
(the one going first alternates):

* ``raw``: a ThreadPoolExecutor(T) mapping ``kernels.process_batch`` over the epoch's
  batches, results consumed in order (``executor.map``). The pool is created once,
  outside the timed part.
* ``loader``: ``HybridLoader(source, recipe, B, policy=LoaderPolicy(cpu_actors=0,
  threads=T), seed=0)``, created once outside the timed part; each round calls
  ``set_epoch`` and iterates one epoch (``--epochs-per-round`` for more). The loader is
  given ``device="cpu"`` (``--device``) so that on a CUDA machine it does not add a
  host-to-device copy the raw loop does not make.

An untimed warm-up epoch first checks that both deliver identical batches, then
``--warmup-rounds`` untimed rounds settle caches and allocator arenas.

The consumer does nothing with the batches, so the loader is always the bottleneck and
its ``stats()["stall_s"]`` (time the consumer waited) is close to its wall time; it is
reported as asked. Goal: loader / raw >= 0.95 (images/s, ratio of the medians).

Run:  python benchmarks/bench_loader_overhead.py [--n 1024] [--rounds 5] [--threads 2]
      [--batch-size 64] [--out bench-loader.json]
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from hybridload import HybridLoader, LoaderPolicy, kernels, recipe, sharding, sources

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_busy_s  # noqa: E402  (shared helpers of benchmarks/)
from _common import photo_source  # noqa: E402

log = logging.getLogger("bench_loader_overhead")

REPO = Path(__file__).resolve().parents[1]
GOAL_LOADER_OVER_RAW = 0.95
OTHER_LOAD_WARN = 0.2  # cores used by other processes during a timed run


class Raw:
    name = "raw"

    def __init__(self, source, rec, threads: int, batch_size: int):
        self.source, self.rec, self.batch_size = source, rec, batch_size
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="bench-raw")

    def batches(self, epoch: int):
        return sharding.rank_batches(len(self.source), batch_size=self.batch_size, seed=0, epoch=epoch,
                                     shuffle=True)

    def results(self, epoch: int):
        """The epoch's batch results, in order."""
        src, rec = self.source, self.rec

        def one(idx):
            return kernels.process_batch(src, rec, idx, 0, epoch, on_error="raise")

        return self.pool.map(one, self.batches(epoch))

    def epoch(self, epoch: int) -> int:
        return sum(len(r.indices) for r in self.results(epoch))

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class Loader:
    name = "loader"

    def __init__(self, source, rec, threads: int, batch_size: int, device: str | None):
        self.loader = HybridLoader(source, rec, batch_size, policy=LoaderPolicy(cpu_actors=0, threads=threads),
                                   seed=0, device=device)

    def epoch(self, epoch: int) -> int:
        self.loader.set_epoch(epoch)
        return sum(images.shape[0] for images, _labels in self.loader)

    def stall_s(self) -> float:
        return float(self.loader.stats()["stall_s"])

    def close(self) -> None:
        self.loader.close()


def timed(fn, *a) -> dict:
    m0, c0, t0 = machine_busy_s(), time.process_time(), time.perf_counter()
    images = fn(*a)
    wall, cpu, m1 = time.perf_counter() - t0, time.process_time() - c0, machine_busy_s()
    other = None if m0 is None or m1 is None else max(0.0, (m1 - m0 - cpu) / wall)
    return {"images": images, "wall_s": wall, "cpu_s": cpu, "images_per_s": images / wall, "cpu_util": cpu / wall,
            "other_load": other}


def check_same_output(raw: Raw, loader: Loader, epoch: int) -> None:
    """Untimed warm-up epoch of both, checking they deliver the same batches."""
    raw_batches = [(r.images, torch.from_numpy(r.labels)) for r in raw.results(epoch)]
    loader.loader.set_epoch(epoch)
    loader_batches = [(images.cpu(), labels.cpu()) for images, labels in loader.loader]
    if len(raw_batches) != len(loader_batches):
        raise RuntimeError(f"raw gave {len(raw_batches)} batches, the loader {len(loader_batches)}")
    for k, ((ri, rl), (li, ll)) in enumerate(zip(raw_batches, loader_batches)):
        if not (torch.equal(ri, li) and torch.equal(rl, ll)):
            raise RuntimeError(f"batch {k} differs between the raw kernel loop and the loader")
    log.info("warm-up epoch: raw loop and loader delivered the same %d batches", len(raw_batches))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--root", type=Path, default=REPO / "data" / "bench-photos",
                    help="where photo sets live; the set of N images is ROOT/nN (generated on first use)")
    ap.add_argument("--n", type=int, default=1024, help="number of images")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median reported)")
    ap.add_argument("--warmup-rounds", type=int, default=1, help="untimed rounds before the timed ones")
    ap.add_argument("--epochs-per-round", type=int, default=1, help="epochs each contestant runs per round")
    ap.add_argument("--threads", "-T", type=int, default=2, help="threads of both contestants")
    ap.add_argument("--batch-size", "-B", type=int, default=64, help="batch size")
    ap.add_argument("--size", type=int, default=224, help="output size of imagenet_train")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="torch.set_num_threads for the run (1: each resize on one core, so T threads use T cores)")
    ap.add_argument("--device", default="cpu",
                    help="the loader's device; cpu keeps it like-for-like with the raw loop (no host-to-device copy)")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        stream=sys.stderr)
    if min(args.n, args.rounds, args.epochs_per_round, args.threads, args.batch_size, args.torch_threads) <= 0:
        ap.error("--n, --rounds, --epochs-per-round, --threads, --batch-size and --torch-threads must be positive")
    if args.warmup_rounds < 0:
        ap.error("--warmup-rounds must be >= 0")

    torch.set_num_threads(args.torch_threads)
    folder, source = photo_source(args.root, args.n, log)
    rec = recipe.imagenet_train(args.size)

    env = {"python": platform.python_version(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
           "cpus": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)), "loadavg_start": os.getloadavg()}
    per_round = {"raw": [], "loader": []}
    stall_rounds = []
    raw = loader = None
    t_start = time.perf_counter()
    try:
        raw = Raw(source, rec, args.threads, args.batch_size)
        loader = Loader(source, rec, args.threads, args.batch_size, args.device)
        warm_epoch = args.rounds * args.epochs_per_round  # not one of the timed epochs
        check_same_output(raw, loader, warm_epoch)
        log.info("%d untimed warm-up round(s), then %d timed rounds of %d epoch(s) each, T=%d, B=%d",
                 args.warmup_rounds, args.rounds, args.epochs_per_round, args.threads, args.batch_size)
        for rnd in range(-args.warmup_rounds, args.rounds):
            epochs = range(rnd * args.epochs_per_round, (rnd + 1) * args.epochs_per_round)
            if rnd < 0:  # untimed: caches, allocator arenas, clocks
                for c in (raw, loader):
                    r = timed(lambda: sum(c.epoch(warm_epoch) for _ in epochs))
                    log.info("warm-up   %-6s %7.0f img/s (discarded)", c.name, r["images_per_s"])
                continue
            pair = (raw, loader) if rnd % 2 == 0 else (loader, raw)
            for c in pair:
                s0 = loader.stall_s()
                r = timed(lambda: sum(c.epoch(e) for e in epochs))
                if c is loader:
                    r["stall_s"] = loader.stall_s() - s0
                    stall_rounds.append(r["stall_s"])
                per_round[c.name].append(r)
                log.info("round %d/%d  %-6s %7.0f img/s  (CPU util %.2f, other load %s%s)", rnd + 1, args.rounds,
                         c.name, r["images_per_s"], r["cpu_util"],
                         "n/a" if r["other_load"] is None else f"{r['other_load']:.2f}",
                         f", stall {r['stall_s']:.2f} s of {r['wall_s']:.2f} s" if "stall_s" in r else "")
        stats = loader.loader.stats()
    finally:
        if loader is not None:
            loader.close()
        if raw is not None:
            raw.close()
    env["loadavg_end"] = os.getloadavg()
    log.info("done in %.1f s", time.perf_counter() - t_start)

    free = max(0, env["affinity"] - args.threads)  # cores the contestants leave to others

    def summary(rounds):
        rates = [r["images_per_s"] for r in rounds]
        other = [r["other_load"] for r in rounds if r["other_load"] is not None]
        return {"median_images_per_s": statistics.median(rates), "min_images_per_s": min(rates),
                "max_images_per_s": max(rates),
                "median_cpu_util": statistics.median(r["cpu_util"] for r in rounds),
                "median_other_load": statistics.median(other) if other else None,
                "contended_rounds": sum(o > free + OTHER_LOAD_WARN for o in other), "rounds": rounds}

    results = {k: summary(v) for k, v in per_round.items()}
    of_medians = results["loader"]["median_images_per_s"] / results["raw"]["median_images_per_s"]
    paired = [lo["images_per_s"] / ra["images_per_s"] for lo, ra in zip(per_round["loader"], per_round["raw"])]
    stall_timed = sum(stall_rounds)
    loader_wall = sum(r["wall_s"] for r in per_round["loader"])
    goal_met = of_medians >= GOAL_LOADER_OVER_RAW

    out = [f"## bench_loader_overhead: {args.n} photo JPEGs, T={args.threads} threads, B={args.batch_size}, "
           f"{args.rounds} interleaved rounds x {args.epochs_per_round} epoch(s), after {args.warmup_rounds} untimed\n",
           f"Python {env['python']}, torch {env['torch']} ({env['torch_threads']} intra-op thread(s)); "
           f"{env['affinity']} CPUs usable; load average {env['loadavg_start'][0]:.2f} at start, "
           f"{env['loadavg_end'][0]:.2f} at end.\n",
           "| contestant | median img/s | min | max | CPU util | other load | contended rounds |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for k in ("raw", "loader"):
        r = results[k]
        other = "n/a" if r["median_other_load"] is None else f"{r['median_other_load']:.2f}"
        out.append(f"| {k} | {r['median_images_per_s']:.0f} | {r['min_images_per_s']:.0f} | "
                   f"{r['max_images_per_s']:.0f} | {r['median_cpu_util']:.2f} | {other} | "
                   f"{r['contended_rounds']}/{len(r['rounds'])} |")
    out += ["", "CPU util: this process's CPU seconds / wall seconds. Other load: cores used by other "
            f"processes meanwhile (/proc/stat, steal included); a round counts as contended when that exceeds "
            f"the {free} free core(s) by {OTHER_LOAD_WARN}."]
    out += ["",
            f"- loader / raw: **{of_medians:.3f}x** (ratio of medians); per round: median "
            f"{statistics.median(paired):.3f}x, range {min(paired):.3f}-{max(paired):.3f}",
            f"- goal loader / raw >= {GOAL_LOADER_OVER_RAW}: " + ("met" if goal_met else "NOT met")
            + f" ({of_medians:.4f})",
            f"- loader stats()['stall_s']: {stats['stall_s']:.2f} s in all (warm-up included), "
            f"{stall_timed:.2f} s over the timed epochs = {stall_timed / loader_wall:.0%} of the loader's "
            f"timed wall time (the consumer does no work, so it waits on nearly everything)",
            ""]
    sys.stdout.write("\n".join(out))
    sys.stdout.flush()
    if args.out:
        doc = {"benchmark": "bench_loader_overhead",
               "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
               "dataset": str(folder), "environment": env, "contestants": results,
               "ratio_loader_over_raw": {"of_medians": of_medians, "paired": paired,
                                         "paired_median": statistics.median(paired)},
               "goal": {"loader_over_raw_min": GOAL_LOADER_OVER_RAW, "met": goal_met},
               "loader_stall_s": {"total": stats["stall_s"], "timed": stall_timed, "per_round": stall_rounds,
                                  "warm_up": stats["stall_s"] - stall_timed},
               "loader_stats": {k: v for k, v in stats.items() if k != "skipped_samples"}}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
