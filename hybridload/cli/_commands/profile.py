"""``hybridload profile``: measure GPU headroom and lane rates, pick the split, write a plan
(the measuring is `hybridload.cli._profile`)."""

from __future__ import annotations

import argparse
import sys

from hybridload.cli._args import (
    count,
    data_root,
    fraction,
    image_folder,
    positive_float,
    positive_int,
    progress_bar,
    recipe_arg,
)
from hybridload.cli._tables import key_value_table

#: LoaderPolicy's defaults for profile's flags, written out so that building the parser (``--help``, a
#: usage error) imports no torch; tests/test_cli.py checks they are LoaderPolicy's
POLICY_DEFAULTS = {"max_gpu_util": 0.9, "reserve_local_cpus": 1, "gpu_threads": 2}


#: The subcommand's name on the command line.
NAME = "profile"


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``profile`` subcommand on ``sub`` (the command line's subparsers)."""
    pr = sub.add_parser(NAME, help="measure GPU headroom and lane rates, pick the split, write a plan")
    pr.add_argument("data", type=data_root, metavar="DATA", help="an ImageFolder root (root/<class>/<image>)")
    pr.add_argument("--recipe", default="imagenet_train:224", help="imagenet_train[:SIZE] or imagenet_eval[:SIZE]")
    pr.add_argument("--batch-size", type=positive_int, default=64, help="images per batch")
    pr.add_argument("--ray-address", default=None, help="measure the nodes of this Ray cluster too")
    pr.add_argument("--seconds", type=positive_float, default=3.0, help="seconds per measurement")
    pr.add_argument("--sample", type=positive_int, default=256, help="images sampled from the dataset")
    pr.add_argument(
        "--demand", type=positive_float, default=None, help="images/s the training consumes (default: unbounded)"
    )
    pr.add_argument(
        "--max-gpu-util",
        type=fraction,
        default=POLICY_DEFAULTS["max_gpu_util"],
        help="the GPU lane may not push the GPU's kernel-active time above this",
    )
    pr.add_argument(
        "--reserve-local-cpus",
        type=count,
        default=POLICY_DEFAULTS["reserve_local_cpus"],
        help="CPUs on this node kept free for training, as LoaderPolicy.reserve_local_cpus",
    )
    pr.add_argument(
        "--gpu-threads",
        type=positive_int,
        default=POLICY_DEFAULTS["gpu_threads"],
        help="DALI's CPU threads in the GPU lane",
    )
    pr.add_argument("--no-check", action="store_true", help="skip measuring the loader at a few shares")
    pr.add_argument("--out", default="plan.json", help="the plan file to write")
    pr.add_argument("--plot", default=None, help="write a PNG of throughput against GPU share (needs [plot])")
    pr.add_argument("--quiet", action="store_true", help="no progress bar")
    pr.set_defaults(func=run, parser=pr)
    return pr


def run(args: argparse.Namespace) -> int:
    from hybridload.cli._profile import plot_profile, run_profile

    src, rec = image_folder(args.data), recipe_arg(args.recipe)
    if args.plot:
        from hybridload._extras import require

        require("matplotlib", "plot", "writing a plot (--plot)")  # before minutes of measuring, not after
    steps = 5 + (1 if args.ray_address else 0) + (0 if args.no_check else 2)
    with progress_bar(total=steps, desc="profiling", unit="step", disable=args.quiet) as bar:

        def progress(msg):
            bar.set_postfix_str(msg)
            bar.update(1)

        prof = run_profile(
            src,
            rec,
            batch_size=args.batch_size,
            seconds=args.seconds,
            sample=args.sample,
            max_gpu_util=args.max_gpu_util,
            reserve_local_cpus=args.reserve_local_cpus,
            demand=args.demand,
            gpu_threads=args.gpu_threads,
            ray_address=args.ray_address,
            check_points=not args.no_check,
            progress=progress,
        )
        bar.update(bar.total - bar.n)
    prof.plan.save(args.out)
    if args.plot:
        plot_profile(prof, args.plot)
    rows = (
        prof.rows
        + [("plan file", args.out)]
        + ([("plot", args.plot)] if args.plot else [])
        + [("profile took", f"{prof.seconds:.1f} s")]
    )
    sys.stdout.write(key_value_table(rows))
    return 0
