"""The ``hybridload`` command line: ``hybridload demo`` (more commands arrive with the planner)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

log = logging.getLogger("hybridload.cli")


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    lines = [f"| {'what'.ljust(width)} | value |", f"| {'-' * width} | ----- |"]
    lines += [f"| {k.ljust(width)} | {v} |" for k, v in rows]
    return "\n".join(lines) + "\n"


def cmd_demo(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from hybridload import HybridLoader, LoaderPolicy, recipe, sources
    from hybridload.datasets import make_photo_folder

    root = Path(args.data)
    log.info("preparing %d photo JPEGs under %s", args.images, root)
    make_photo_folder(root, args.images, num_classes=args.classes)
    src = sources.ImageFolder(root)
    rec = recipe.imagenet_train(args.size)
    policy = LoaderPolicy(mode="cpu", cpu_actors=0, threads=args.threads)
    rows = []
    with HybridLoader(src, rec, args.batch_size, policy=policy, seed=0) as loader:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            n, t0 = 0, time.perf_counter()
            for images, _labels in tqdm(loader, desc=f"epoch {epoch}", unit="batch", disable=args.quiet):
                n += images.shape[0]
            dt = time.perf_counter() - t0
            rows.append((f"epoch {epoch} images/s", f"{n / dt:.0f} ({n} images in {dt:.2f} s)"))
        st = loader.stats()
    rows += [("lane", ", ".join(f"{k}: {v['share']:.0%}" for k, v in st["lanes"].items())),
             ("threads", str(policy.resolved_threads())),
             ("batch", f"{args.batch_size} x {tuple(images.shape[1:])} {images.dtype}"),
             ("consumer waited", f"{st['stall_s']:.2f} s"),
             ("skipped samples", str(st["skipped"])), ("retries", str(st["retries"]))]
    sys.stdout.write(_table(rows))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hybridload", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run the loader on a generated photo dataset and report images/s")
    d.add_argument("--data", default=os.environ.get("HYBRIDLOAD_DEMO_DATA", "data/demo-photos"),
                   help="where the generated photo dataset lives (made once, reused)")
    d.add_argument("--images", type=int, default=512, help="dataset size")
    d.add_argument("--classes", type=int, default=8)
    d.add_argument("--batch-size", type=int, default=64)
    d.add_argument("--size", type=int, default=224, help="output size of RandomResizedCrop")
    d.add_argument("--epochs", type=int, default=2)
    d.add_argument("--threads", type=int, default=None, help="in-process lane threads (default: all CPUs)")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    d.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
