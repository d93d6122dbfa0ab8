"""What the HybridLoader examples share: command-line flags, a generated photo dataset,
the loader policy those flags select, and a small CNN. The loader calls themselves are
written out in each example."""

from __future__ import annotations

import argparse
import logging
import os
import tempfile

import torch

from hybridload import LoaderPolicy
from hybridload.cli.demo_data import make_photo_folder

log = logging.getLogger("example")


def parser(doc: str, *, steps: int | None = None, epochs: int = 1, batch_size: int = 16) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="an ImageFolder tree root/<class>/<image> (local path or fsspec URL); "
                                   "default: a generated photo dataset in the temp directory")
    ap.add_argument("--steps", type=int, default=steps, help="stop each epoch after this many steps (default: all)")
    ap.add_argument("--epochs", type=int, default=epochs)
    ap.add_argument("--batch-size", type=int, default=batch_size, help="per process (per rank under DDP)")
    ap.add_argument("--ray", action="store_true",
                    help="decode/augment on Ray CPU actors (RAY_ADDRESS if set, else an embedded local cluster) "
                         "instead of threads in this process")
    ap.add_argument("--actors", type=int, default=None, help="with --ray: actors per rank (default: from the cluster)")
    return ap


def policy(args) -> LoaderPolicy:
    """The in-process lane (threads here, no Ray) by default; Ray CPU actors with --ray.
    --ray uses RAY_ADDRESS if set, else an embedded cluster on 127.0.0.1."""
    if args.ray:
        return LoaderPolicy(cpu_actors=args.actors, ray_address=os.environ.get("RAY_ADDRESS") or "embedded")
    return LoaderPolicy(cpu_actors=0)


def photo_folder(data: str | None, n: int = 128, num_classes: int = 4) -> str:
    """``data`` if given, else a generated ImageFolder of photo JPEGs (reused across runs)."""
    if data:
        return data
    root = os.path.join(tempfile.gettempdir(), f"hybridload-examples-photos-{n}-{num_classes}")
    return str(make_photo_folder(root, n, num_classes=num_classes, seed=0))


def small_cnn(num_classes: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, num_classes))


def setup_logging(rank: int = 0) -> None:
    logging.basicConfig(level=logging.INFO, format=f"[rank {rank}] %(levelname)s %(name)s: %(message)s")
