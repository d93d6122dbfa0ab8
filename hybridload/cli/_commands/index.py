"""``hybridload index PATTERN -o manifest.json``: a shard manifest (and sidecar member indexes) for
TarShards (the indexing is `hybridload.cli._index`)."""

from __future__ import annotations

import argparse

from hybridload.cli import _index as index
from hybridload.cli._args import positive_int

#: The subcommand's name on the command line.
NAME = "index"


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``index`` subcommand on ``sub`` (the command line's subparsers)."""
    ix = sub.add_parser(NAME, help="write a shard manifest (and sidecar member indexes) for TarShards")
    ix.add_argument(
        "pattern",
        metavar="PATTERN",
        help="the shards: a brace pattern such as 'train-{000000..000999}.tar', or a local glob such as "
        "'train/*.tar' (sorted)",
    )
    ix.add_argument("-o", "--out", default="manifest.json", help="the manifest to write: a file path, not a directory")
    ix.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="shards scanned at once (default: 32 threads for URLs, one process per CPU for local shards)",
    )
    ix.add_argument(
        "--image-exts",
        default=None,
        help="extensions of the image members, comma-separated (default: TarShards's, jpg,jpeg,png,webp)",
    )
    ix.add_argument("--no-sidecars", action="store_true", help="do not write <shard>.members.json next to each shard")
    ix.add_argument("--quiet", action="store_true", help="no progress bar")
    ix.set_defaults(func=run, parser=ix)
    return ix


def run(args: argparse.Namespace) -> int:
    """Write the manifest of the shards ``args.pattern`` names (`hybridload.cli._index.cmd_index`)."""
    return index.cmd_index(args)
