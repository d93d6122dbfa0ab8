"""The `hybridload` command line: `demo`, `profile`, `bench` and `index`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from pathlib import Path

from hybridload.cli import bench, index  # both import torch and the loader only when a command runs
from hybridload.cli.args import (Parser, UsageError, choices_list, count, data_root, fail, fraction, nonneg_float,
                       positive_float, positive_int, user_input)
from hybridload.cli.tables import format_table, key_value_table

log = logging.getLogger("hybridload.cli.commands")

BENCH_MODES = bench.MODES + bench.POLICY_MODES


#: LoaderPolicy's defaults for profile's flags, written out so that building the parser (``--help``, a
#: usage error) imports no torch; tests/test_cli.py checks they are LoaderPolicy's
POLICY_DEFAULTS = {"max_gpu_util": 0.9, "reserve_local_cpus": 1, "gpu_threads": 2}


def _bar(**kw):
    from tqdm import tqdm
    return tqdm(**kw)


def cmd_demo(args: argparse.Namespace) -> int:
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources
    from hybridload.cli.demo_data import make_photo_folder

    root = Path(args.data)
    log.debug("the demo photo set: %d JPEGs under %s", args.images, root)
    with user_input("--data"):  # an existing directory the demo did not make: never written into
        make_photo_folder(root, args.images, num_classes=args.classes)
    src = sources.ImageFolder(root)
    rec = recipe.imagenet_train(args.size)
    from hybridload.policy.decode import START_SHARE
    share = START_SHARE if args.mode == "split" else None  # no plan here: the loader's own starting share
    if args.in_process:
        policy = LoaderPolicy(mode=args.mode, gpu_share=share, cpu_actors=0, threads=args.threads)
    else:  # the default: the CPU lane on this machine without Ray (--ray: Ray actors), DALI (GPU, else CPU-only)
        policy = LoaderPolicy(mode=args.mode, gpu_share=share, reserve_local_cpus=0, placement="any",
                              ray_address=(os.environ.get("RAY_ADDRESS") or "embedded") if args.ray else None)
    rows = []
    with HybridLoader(src, rec, args.batch_size, policy=policy, seed=0) as loader:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            n, t0 = 0, time.perf_counter()
            for images, _labels in _bar(iterable=loader, desc=f"epoch {epoch}", unit="batch", disable=args.quiet):
                n += images.shape[0]
            dt = time.perf_counter() - t0
            note = " (start-up included)" if epoch == 0 else ""
            rows.append((f"epoch {epoch} images/s{note}", f"{n / dt:.0f} ({n} images in {dt:.2f} s)"))
        st = loader.stats()
        ran = loader.describe_lanes(used_only=True)
    from hybridload.lanes.base import LaneKind
    gpu_realised = st["lanes"].get(LaneKind.GPU.value, {}).get("share", 0.0)  # GPU lanes report as their kind
    rows += [("lane shares (realised)", ", ".join(f"{k}: {v['share']:.0%}" for k, v in st["lanes"].items())),
             ("what ran (lanes that took batches)", ran),
             (f"GPU cap ({args.mode} mode, at the end)", f"{st['plan']['gpu_share']:.2f} of the batches at most"),
             ("GPU share (realised)", f"{gpu_realised:.2f}"),
             ("last batch delivered", f"{tuple(images.shape)} {images.dtype}"),
             ("consumer waited for batches (after the lanes were built)", f"{st['stall_s']:.2f} s"),
             ("skipped samples", str(st["skipped"])), ("retries", str(st["retries"]))]
    sys.stdout.write(key_value_table(rows))
    return 0


def _recipe(spec: str):
    from hybridload import recipe
    name, _, size = spec.partition(":")
    makers = {"imagenet_train": recipe.imagenet_train, "imagenet_eval": recipe.imagenet_eval}
    if name not in makers:
        raise UsageError(f"--recipe must be imagenet_train[:SIZE] or imagenet_eval[:SIZE], got {spec!r}")
    with user_input(f"--recipe {spec!r}"):
        return makers[name](int(size) if size else 224)


def _source(data: str):
    from hybridload import sources
    with user_input("DATA"):
        return sources.ImageFolder(data)


def cmd_profile(args: argparse.Namespace) -> int:
    from hybridload.cli.profile import plot_profile, run_profile

    src, rec = _source(args.data), _recipe(args.recipe)
    if args.plot:
        from hybridload.extras import require
        require("matplotlib", "plot", "writing a plot (--plot)")  # before minutes of measuring, not after
    steps = 5 + (1 if args.ray_address else 0) + (0 if args.no_check else 2)
    with _bar(total=steps, desc="profiling", unit="step", disable=args.quiet) as bar:
        def progress(msg):
            bar.set_postfix_str(msg)
            bar.update(1)
        prof = run_profile(src, rec, batch_size=args.batch_size, seconds=args.seconds, sample=args.sample,
                           max_gpu_util=args.max_gpu_util, reserve_local_cpus=args.reserve_local_cpus,
                           demand=args.demand, gpu_threads=args.gpu_threads, ray_address=args.ray_address,
                           check_points=not args.no_check, progress=progress)
        bar.update(bar.total - bar.n)
    prof.plan.save(args.out)
    if args.plot:
        plot_profile(prof, args.plot)
    rows = prof.rows + [("plan file", args.out)] + ([("plot", args.plot)] if args.plot else []) + \
        [("profile took", f"{prof.seconds:.1f} s")]
    sys.stdout.write(key_value_table(rows))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import json

    from hybridload.cli.bench import as_json, plot_results, run_mode
    from hybridload.planner import Plan

    if args.plan:
        with user_input(f"--plan {args.plan}"):
            plan = Plan.load(args.plan)
    else:
        plan = None
    src, rec = _source(args.data), _recipe(args.recipe)
    if args.plot:
        from hybridload.extras import require
        require("matplotlib", "plot", "writing a plot (--plot)")
    results = []
    with _bar(total=args.batches * len(args.modes), desc="bench", unit="batch", disable=args.quiet) as bar:
        for mode in args.modes:
            bar.set_postfix_str(mode)
            results.append(run_mode(src, rec, mode, batch_size=args.batch_size, batches=args.batches,
                                    step_ms=args.step_ms, plan=plan, ray_address=args.ray_address,
                                    threads=args.threads, progress=bar.update))
    meta = {"data": args.data, "recipe": args.recipe, "batch_size": args.batch_size, "batches": args.batches,
            "step_ms": args.step_ms, "plan": args.plan, "ray_address": args.ray_address}
    with open(args.out, "w") as f:
        json.dump(as_json(results, meta), f, indent=2)
    if args.plot:
        plot_results(results, args.plot)
    rows = [[r.mode, f"{r.images_per_s:.0f}", ", ".join(f"{k} {v:.0%}" for k, v in r.shares.items()),
             f"{r.wait_fraction:.0%}", f"{r.peak_rss_mb:.0f} MiB",
             f"{r.peak_gpu_mb:.0f} MiB" if r.peak_gpu_mb is not None else "no GPU", r.label] for r in results]
    sys.stdout.write(format_table(["mode", "images/s", "lane shares", "waits for data", "peak host RSS",
                                   "peak GPU memory", "what ran"], rows, right=[1, 3, 4, 5]))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from hybridload import __version__
    p = Parser(prog="hybridload", description="hybridload's command line: a demo on generated photos, the planner's "
               "profile, a benchmark of the loader's modes, and shard manifests for TarShards.")
    p.add_argument("--version", action="version", version=f"hybridload {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log hybridload's debug messages")
    sub = p.add_subparsers(dest="command", metavar="{demo,profile,bench,index}")
    d = sub.add_parser("demo", help="run the loader on a generated photo dataset and report images/s")
    d.add_argument("--data", default=os.environ.get("HYBRIDLOAD_DEMO_DATA", "data/demo-photos"),
                   help="where the generated photo dataset lives (made once, reused)")
    d.add_argument("--images", type=positive_int, default=512, help="dataset size")
    d.add_argument("--classes", type=positive_int, default=8, help="classes (sub-folders) of the dataset")
    d.add_argument("--batch-size", type=positive_int, default=64, help="images per batch")
    d.add_argument("--size", type=positive_int, default=224, help="output size of RandomResizedCrop")
    d.add_argument("--epochs", type=positive_int, default=2, help="passes over the dataset")
    d.add_argument("--mode", default="auto", choices=["auto", "split", "gpu", "cpu"], help="LoaderPolicy mode")
    d.add_argument("--in-process", action="store_true", help="the in-process lane (threads), --threads of them")
    d.add_argument("--ray", action="store_true",
                   help="the CPU lane on Ray actors (RAY_ADDRESS if set, else an embedded cluster on 127.0.0.1)")
    d.add_argument("--threads", type=positive_int, default=None, help="in-process lane threads (default: all CPUs)")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    d.set_defaults(func=cmd_demo, parser=d)

    pr = sub.add_parser("profile", help="measure GPU headroom and lane rates, pick the split, write a plan")
    pr.add_argument("data", type=data_root, metavar="DATA", help="an ImageFolder root (root/<class>/<image>)")
    pr.add_argument("--recipe", default="imagenet_train:224", help="imagenet_train[:SIZE] or imagenet_eval[:SIZE]")
    pr.add_argument("--batch-size", type=positive_int, default=64, help="images per batch")
    pr.add_argument("--ray-address", default=None, help="measure the nodes of this Ray cluster too")
    pr.add_argument("--seconds", type=positive_float, default=3.0, help="seconds per measurement")
    pr.add_argument("--sample", type=positive_int, default=256, help="images sampled from the dataset")
    pr.add_argument("--demand", type=positive_float, default=None,
                    help="images/s the training consumes (default: unbounded)")
    pr.add_argument("--max-gpu-util", type=fraction, default=POLICY_DEFAULTS["max_gpu_util"],
                    help="the GPU lane may not push the GPU's kernel-active time above this")
    pr.add_argument("--reserve-local-cpus", type=count, default=POLICY_DEFAULTS["reserve_local_cpus"],
                    help="CPUs on this node kept free for training, as LoaderPolicy.reserve_local_cpus")
    pr.add_argument("--gpu-threads", type=positive_int, default=POLICY_DEFAULTS["gpu_threads"],
                    help="DALI's CPU threads in the GPU lane")
    pr.add_argument("--no-check", action="store_true", help="skip measuring the loader at a few shares")
    pr.add_argument("--out", default="plan.json", help="the plan file to write")
    pr.add_argument("--plot", default=None, help="write a PNG of throughput against GPU share (needs [plot])")
    pr.add_argument("--quiet", action="store_true", help="no progress bar")
    pr.set_defaults(func=cmd_profile, parser=pr)

    b = sub.add_parser("bench", help="single-GPU against multi-node against CPU-only throughput")
    b.add_argument("data", type=data_root, metavar="DATA", help="an ImageFolder root (root/<class>/<image>)")
    b.add_argument("--plan", default=None, help="a plan file from `hybridload profile`")
    b.add_argument("--modes", type=choices_list(BENCH_MODES), default="single-gpu,multi-node,cpu",
                   help=f"comma-separated, from {', '.join(BENCH_MODES)} (auto, gpu, split: LoaderPolicy's "
                        "modes on this node's lanes)")
    b.add_argument("--batches", type=positive_int, default=50, help="timed batches per mode")
    b.add_argument("--batch-size", type=positive_int, default=64, help="images per batch")
    b.add_argument("--step-ms", type=nonneg_float, default=0.0, help="the consumer's time per training step")
    b.add_argument("--recipe", default="imagenet_train:224", help="imagenet_train[:SIZE] or imagenet_eval[:SIZE]")
    b.add_argument("--ray-address", default=None, help="the cluster for multi-node (default: embedded)")
    b.add_argument("--threads", type=positive_int, default=None, help="in-process lane threads (default: all CPUs)")
    b.add_argument("--out", default="bench.json", help="the JSON results file to write")
    b.add_argument("--plot", default=None, help="write a PNG of images/s per mode (needs [plot])")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.set_defaults(func=cmd_bench, parser=b)
    index.add_parser(sub)
    return p


def configure_logging(verbose: bool) -> None:
    """Other libraries' warnings only; hybridload's INFO (DEBUG with -v)."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("hybridload").setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.captureWarnings(True)  # warnings.warn(...) too: a log line above the progress bar, not through it
    warnings.formatwarning = _one_line  # that line without the file name and the warning's source line


def _one_line(message, category, filename, lineno, line=None) -> str:
    return f"{category.__name__}: {message}"


def main(argv: list[str] | None = None) -> int:
    """The ``hybridload`` command: run one subcommand and return its exit status.

    Exit statuses: 0 done; 2 a usage mistake (a bad flag or argument, a missing directory, a
    plan file that is not one), one line on stderr; 1 an optional extra is missing (one line
    naming the ``pip install`` that adds it); 130 interrupted (Ctrl-C).

    Args:
        argv: the arguments after ``hybridload``; None: ``sys.argv[1:]``.
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the command's own parser when there is one
        getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.error("a command is required: demo, profile, bench or index")
    from tqdm.contrib.logging import logging_redirect_tqdm  # after parsing: --help and usage errors stay fast

    from hybridload.extras import MissingExtraError
    from hybridload.planner import PlanFormatError

    configure_logging(args.verbose)
    prog = f"hybridload {args.command}"
    try:
        with logging_redirect_tqdm():  # log lines go above the progress bars, never into them
            return args.func(args)
    except (UsageError, PlanFormatError) as exc:
        return fail(prog, str(exc))
    except MissingExtraError as exc:
        fail(prog, str(exc))
        return 1
    except KeyboardInterrupt:
        fail(prog, "interrupted")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
