"""``hybridload bench``: single-GPU against multi-node against CPU-only throughput (the runs are
`hybridload.cli._bench`)."""

from __future__ import annotations

import argparse
import sys

from hybridload.cli import _bench as bench
from hybridload.cli._args import (
    choices_list,
    data_root,
    image_folder,
    nonneg_float,
    positive_int,
    progress_bar,
    recipe_arg,
    user_input,
)
from hybridload.cli._tables import format_table

BENCH_MODES = bench.MODES + bench.POLICY_MODES


#: The subcommand's name on the command line.
NAME = "bench"


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``bench`` subcommand on ``sub`` (the command line's subparsers)."""
    b = sub.add_parser(NAME, help="single-GPU against multi-node against CPU-only throughput")
    b.add_argument("data", type=data_root, metavar="DATA", help="an ImageFolder root (root/<class>/<image>)")
    b.add_argument("--plan", default=None, help="a plan file from `hybridload profile`")
    b.add_argument(
        "--modes",
        type=choices_list(BENCH_MODES),
        default="single-gpu,multi-node,cpu",
        help=f"comma-separated, from {', '.join(BENCH_MODES)} (auto, gpu, split: LoaderPolicy's "
        "modes on this node's lanes)",
    )
    b.add_argument("--batches", type=positive_int, default=50, help="timed batches per mode")
    b.add_argument("--batch-size", type=positive_int, default=64, help="images per batch")
    b.add_argument("--step-ms", type=nonneg_float, default=0.0, help="the consumer's time per training step")
    b.add_argument("--recipe", default="imagenet_train:224", help="imagenet_train[:SIZE] or imagenet_eval[:SIZE]")
    b.add_argument("--ray-address", default=None, help="the cluster for multi-node (default: embedded)")
    b.add_argument("--threads", type=positive_int, default=None, help="in-process lane threads (default: all CPUs)")
    b.add_argument("--out", default="bench.json", help="the JSON results file to write")
    b.add_argument("--plot", default=None, help="write a PNG of images/s per mode (needs [plot])")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.set_defaults(func=run, parser=b)
    return b


def run(args: argparse.Namespace) -> int:
    import json

    from hybridload.cli._bench import as_json, plot_results, run_mode
    from hybridload.planner import Plan

    if args.plan:
        with user_input(f"--plan {args.plan}"):
            plan = Plan.load(args.plan)
    else:
        plan = None
    src, rec = image_folder(args.data), recipe_arg(args.recipe)
    if args.plot:
        from hybridload._extras import require

        require("matplotlib", "plot", "writing a plot (--plot)")
    results = []
    with progress_bar(total=args.batches * len(args.modes), desc="bench", unit="batch", disable=args.quiet) as bar:
        for mode in args.modes:
            bar.set_postfix_str(mode)
            results.append(
                run_mode(
                    src,
                    rec,
                    mode,
                    batch_size=args.batch_size,
                    batches=args.batches,
                    step_ms=args.step_ms,
                    plan=plan,
                    ray_address=args.ray_address,
                    threads=args.threads,
                    progress=bar.update,
                )
            )
    meta = {
        "data": args.data,
        "recipe": args.recipe,
        "batch_size": args.batch_size,
        "batches": args.batches,
        "step_ms": args.step_ms,
        "plan": args.plan,
        "ray_address": args.ray_address,
    }
    with open(args.out, "w") as f:
        json.dump(as_json(results, meta), f, indent=2)
    if args.plot:
        plot_results(results, args.plot)
    rows = [
        [
            r.mode,
            f"{r.images_per_s:.0f}",
            ", ".join(f"{k} {v:.0%}" for k, v in r.shares.items()),
            f"{r.wait_fraction:.0%}",
            f"{r.peak_rss_mb:.0f} MiB",
            f"{r.peak_gpu_mb:.0f} MiB" if r.peak_gpu_mb is not None else "no GPU",
            r.label,
        ]
        for r in results
    ]
    sys.stdout.write(
        format_table(
            ["mode", "images/s", "lane shares", "waits for data", "peak host RSS", "peak GPU memory", "what ran"],
            rows,
            right=[1, 3, 4, 5],
        )
    )
    return 0
