"""``hybridload demo``: the loader on a generated photo set, with images/s and what ran."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from hybridload.cli._args import positive_int, progress_bar, user_input
from hybridload.cli._tables import key_value_table
from hybridload import _environment as environment

log = logging.getLogger("hybridload.cli._commands")


#: The subcommand's name on the command line.
NAME = "demo"


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``demo`` subcommand on ``sub`` (the command line's subparsers)."""
    d = sub.add_parser(NAME, help="run the loader on a generated photo dataset and report images/s")
    d.add_argument(
        "--data",
        default=environment.text("HYBRIDLOAD_DEMO_DATA") or "data/demo-photos",
        help="where the generated photo dataset lives (made once, reused)",
    )
    d.add_argument("--images", type=positive_int, default=512, help="dataset size")
    d.add_argument("--classes", type=positive_int, default=8, help="classes (sub-folders) of the dataset")
    d.add_argument("--batch-size", type=positive_int, default=64, help="images per batch")
    d.add_argument("--size", type=positive_int, default=224, help="output size of RandomResizedCrop")
    d.add_argument("--epochs", type=positive_int, default=2, help="passes over the dataset")
    d.add_argument("--mode", default="auto", choices=["auto", "split", "gpu", "cpu"], help="LoaderPolicy mode")
    d.add_argument("--in-process", action="store_true", help="the in-process lane (threads), --threads of them")
    d.add_argument(
        "--ray",
        action="store_true",
        help="the CPU lane on Ray actors (RAY_ADDRESS if set, else an embedded cluster on 127.0.0.1)",
    )
    d.add_argument("--threads", type=positive_int, default=None, help="in-process lane threads (default: all CPUs)")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    d.set_defaults(func=run, parser=d)
    return d


def run(args: argparse.Namespace) -> int:
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources
    from hybridload.cli.demo_data import make_photo_folder

    root = Path(args.data)
    log.debug("the demo photo set: %d JPEGs under %s", args.images, root)
    with user_input("--data"):  # an existing directory the demo did not make: never written into
        make_photo_folder(root, args.images, num_classes=args.classes)
    src = sources.ImageFolder(root)
    rec = recipe.imagenet_train(args.size)
    from hybridload._policy.decode import START_SHARE

    share = START_SHARE if args.mode == "split" else None  # no plan here: the loader's own starting share
    if args.in_process:
        policy = LoaderPolicy(mode=args.mode, gpu_share=share, cpu_actors=0, threads=args.threads)
    else:  # the default: the CPU lane on this machine without Ray (--ray: Ray actors), DALI (GPU, else CPU-only)
        policy = LoaderPolicy(
            mode=args.mode,
            gpu_share=share,
            reserve_local_cpus=0,
            placement="any",
            ray_address=(environment.text("RAY_ADDRESS") or "embedded") if args.ray else None,
        )
    rows = []
    with HybridLoader(src, rec, args.batch_size, policy=policy, seed=0) as loader:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            n, t0 = 0, time.perf_counter()
            for images, _labels in progress_bar(
                iterable=loader, desc=f"epoch {epoch}", unit="batch", disable=args.quiet
            ):
                n += images.shape[0]
            dt = time.perf_counter() - t0
            note = " (start-up included)" if epoch == 0 else ""
            rows.append((f"epoch {epoch} images/s{note}", f"{n / dt:.0f} ({n} images in {dt:.2f} s)"))
        st = loader.stats()
        ran = loader.describe_lanes(used_only=True)
    from hybridload.lanes._base import LaneKind

    gpu_realised = st["lanes"].get(LaneKind.GPU.value, {}).get("share", 0.0)  # GPU lanes report as their kind
    rows += [
        ("lane shares (realised)", ", ".join(f"{k}: {v['share']:.0%}" for k, v in st["lanes"].items())),
        ("what ran (lanes that took batches)", ran),
        (f"GPU cap ({args.mode} mode, at the end)", f"{st['plan']['gpu_share']:.2f} of the batches at most"),
        ("GPU share (realised)", f"{gpu_realised:.2f}"),
        ("last batch delivered", f"{tuple(images.shape)} {images.dtype}"),
        ("consumer waited for batches (after the lanes were built)", f"{st['stall_s']:.2f} s"),
        ("skipped samples", str(st["skipped"])),
        ("retries", str(st["retries"])),
    ]
    sys.stdout.write(key_value_table(rows))
    return 0
