#!/usr/bin/env python
"""The in-process lane's own cost on one thread (issue 37): HybridLoader on the in-process lane
(threads=1, batch ``-B``, RandomResizedCrop(224) + flip (always, as profile_crop_stages.py), uint8, no Normalize) against the bare
kernel loop (``kernels.process_sample`` over the same samples and epochs), in process CPU seconds
per image, with the process's minor page faults per image. Each round runs loop, loader, loop
(``--epochs-per-round`` passes each), so the box's load drift hits both alike; the loader's
overhead is its time less the mean of the two loops; medians over rounds. Wall time per image,
loader over loop, is shown too (a quiet machine only).

With ``--local-workers processes`` the loader runs the process lane (one worker process) instead:
the loader's CPU and faults are then the trainer process's own (the copy of each batch out of its
shared-memory slot, the dispatch), the worker's kernel time is not in them, and the "overhead"
column is the trainer's cost less the kernel loop's (negative: the trainer spends less than the
kernel would).

With ``--base REV`` it measures REV and ``--head`` (default HEAD), each exported with git archive
as ``compare_revisions.py`` does, in child processes that alternate base, head, head, base, ...
(``--repeats``), this script running on each revision's package: the two side by side.

    python benchmarks/bench_lane_overhead.py --base main --n 256 --rounds 5 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _harness as h
from _data import parser, photo_source

log = logging.getLogger("bench_lane_overhead")


def _cpu_faults() -> tuple[float, int, float]:
    return time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()


def measure(args) -> dict:
    """This process's package: per round, CPU ms and faults per image of the loop and the loader."""
    import torch

    from hybridload import HybridLoader, LoaderPolicy, kernels, recipe

    torch.set_num_threads(1)
    _, src = photo_source(args.root, args.n, log)
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


def _child_args(args) -> list[str]:
    return [
        "--one",
        *("--root", str(args.root), "--n", str(args.n), "--rounds", str(args.rounds)),
        *("--warmup-rounds", str(args.warmup_rounds), "--batch-size", str(args.batch_size)),
        *("--epochs-per-round", str(args.epochs_per_round), "--local-workers", args.local_workers),
    ]


def side_by_side(args) -> dict[str, list[dict]]:
    """{"base": [...], "head": [...]}: one measurement per repeat and side, in alternating child processes."""
    import compare_revisions as cr

    got: dict[str, list[dict]] = {"base": [], "head": []}
    with tempfile.TemporaryDirectory(prefix="lane-overhead-") as tmp:
        trees = {side: Path(tmp) / side for side in got}
        for side, rev in (("base", args.base), ("head", args.head)):
            log.info("%s: %s at %s", side, rev, cr.export(rev, trees[side]))
            cr.check_imports_from(trees[side])
        for rep in range(args.repeats):
            for side in cr.order(rep):
                out = Path(tmp) / f"{side}-{rep}.json"
                cmd = [sys.executable, __file__, *_child_args(args), "--out", str(out)]
                proc = subprocess.run(cmd, env=cr.tree_env(trees[side]), capture_output=True, text=True, timeout=1800)
                if proc.returncode:
                    raise RuntimeError(f"{side} run {rep} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
                got[side].append(json.loads(out.read_text())["result"])
                log.info("%s repeat %d: overhead %.3f ms/img", side, rep, got[side][-1]["overhead_ms"])
    return got


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


def main(argv=None) -> int:
    ap = parser(__doc__, quick=dict(n=64, rounds=1, warmup_rounds=0), n=256, rounds=5)
    ap.add_argument("--batch-size", "-B", type=int, default=32, help="the loader's batch size")
    ap.add_argument("--epochs-per-round", type=int, default=2, help="passes of each side per round")
    ap.add_argument("--base", default=None, help="measure this revision and --head side by side")
    ap.add_argument("--head", default="HEAD", help="the revision after (with --base)")
    ap.add_argument("--repeats", type=int, default=2, help="child runs per revision (with --base), alternating")
    ap.add_argument(
        "--local-workers",
        choices=("threads", "processes"),
        default="threads",
        help="the loader's lane: 1 thread or 1 process",
    )
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one or args.base is None:
        result = measure(args)
        runs = {"this tree": [result]}
    else:
        runs = side_by_side(args)
    rows = [_row(label, rs) for label, rs in runs.items()]
    if len(runs) == 2:
        b, hd = (statistics.median(r["overhead_ms"] for r in runs[s]) for s in ("base", "head"))
        lb, lh = (statistics.median(r["loader_ms"] for r in runs[s]) for s in ("base", "head"))
        rows.append(["head / base", "", f"{lh / lb:.3f}x", f"{hd / b:.2f}x" if b > 0 else "n/a", "", "", "", ""])
    lines = [
        f"## bench_lane_overhead: {args.n} photo JPEGs, "
        + ("in-process lane, 1 thread" if args.local_workers == "threads" else "process lane, 1 worker")
        + f", B={args.batch_size}, "
        f"RandomResizedCrop(224) + flip uint8, {args.rounds} rounds x {args.epochs_per_round} passes"
        + (f", {args.repeats} repeats per revision, alternating" if len(runs) == 2 else ""),
        "",
        h.environment_line(h.environment()),
        "",
        *h.markdown_table(
            [
                "tree",
                "kernel loop CPU ms/img",
                "loader CPU ms/img",
                "lane overhead ms/img",
                "overhead / kernel",
                "loop faults/img",
                "loader faults/img",
                "loader / loop wall time",
            ],
            rows,
        ),
        "",
    ]
    doc = {"benchmark": "bench_lane_overhead", "rows": rows}
    if args.one:
        doc["result"] = result
    else:
        doc["runs"] = runs
    h.emit(lines, args, doc, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
