"""The sample counts of a pattern's or a list's shards, from one scan of each at construction
(no manifest); past `MANIFEST_HINT_SHARDS` shards it says to write a manifest once instead."""

from __future__ import annotations

import logging
import warnings
from typing import Callable, Sequence

from hybridload.sources._tar.shard_members import ShardMembers, shard_members
from hybridload.sources._tar.tar_index import shard_index

log = logging.getLogger(__name__)

#: past this many shards given without a manifest, construction (a scan of each) says to write one
MANIFEST_HINT_SHARDS = 1000


def scan_counts(
    urls: list[str],
    storage_options: dict,
    cache_dir: str | None,
    image_exts: Sequence[str],
    label: Callable[[str], int] | None,
    keep: Callable[[int, ShardMembers], None],
) -> list[int]:
    """Count (and check) each shard of ``urls`` by its member index, in order; ``keep(s, members)``
    is handed each shard's member table as it is read."""
    if not urls:
        raise ValueError(
            "TarShards: no shards given; pass a manifest path, a brace pattern such as "
            "'train-{000000..000099}.tar' or a non-empty list of shard paths/URLs"
        )
    if len(urls) > MANIFEST_HINT_SHARDS:
        warnings.warn(
            f"TarShards: scanning {len(urls)} shards one after another to count their samples; "
            f"write a manifest once with `hybridload index PATTERN -o manifest.json` (in parallel, "
            f"resumable) and pass its path: then building the source touches no shard",
            stacklevel=4,
        )
    counts = []
    for s, url in enumerate(urls):
        members = shard_members(url, shard_index(url, storage_options, cache_dir), image_exts, label)
        counts.append(len(members))
        keep(s, members)
        if not len(members):
            log.warning("TarShards: shard %r holds no samples", url)
    return counts
