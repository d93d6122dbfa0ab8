"""One shard's per-sample facts as a worker needs them (`ShardMembers`, checked as WebDataset's
rules say) and the per-process LRU that holds the last ``capacity`` shards', so a worker's memory
is bounded by the shards it touches."""

from __future__ import annotations

import numbers
import os
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np


@dataclass(frozen=True)
class ShardMembers:
    """One shard's samples in tar order.

    Attributes:
        names: the image member of each sample (``"<key>.<ext>"``).
        offsets: where each image's bytes begin in the shard.
        sizes: each image's size in bytes.
        labels: each sample's label (-1 where it has none).
    """

    names: tuple[str, ...]
    offsets: np.ndarray
    sizes: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.names)


def _parse_cls(url: str, key: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(
            f"TarShards: shard {url!r}, key {key!r}: {key}.cls holds {text[:40]!r}, not an integer class index"
        ) from None


def _call_label(label: Callable[[str], int], url: str, key: str) -> int:
    try:
        value = label(key)
    except Exception as exc:  # the user's function: say which key it failed on
        raise ValueError(f"TarShards: label({key!r}) for shard {url!r} raised {type(exc).__name__}: {exc}") from exc
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise ValueError(
            f"TarShards: label({key!r}) for shard {url!r} returned {value!r}; it must return an int class index"
        )
    return int(value)


def _dotted_key_message(url: str, key: str, exts: list[str], images: list[str]) -> str:
    """The error for members that WebDataset's key rule merges: dots inside the sample keys."""
    names = ", ".join(f"{key}.{e}" for e in exts[:6]) + (", ..." if len(exts) > 6 else "")
    dotted = next(e for e in exts if "." in e).rsplit(".", 1)[0]
    pick = (
        f", or, for one sample with several images, name the one to use in full: image_exts=({images[0]!r},)"
        if len(images) > 1
        else ""
    )
    return (
        f"TarShards: shard {url!r}, key {key!r} groups the members {names}: a key ends at the first dot "
        f"of the member's basename (as in WebDataset), so keys with dots such as {key + '.' + dotted!r} "
        f"merge samples into one or lose their .cls label (webdataset's own to_tuple fails on them too). "
        f"Rewrite the shards with keys without dots (e.g. {key + '_' + dotted.replace('.', '_')!r}){pick}"
    )


def image_member(
    url: str, key: str, members: list, image_exts: Sequence[str], labelled: bool = False
) -> tuple[str, int, int]:
    """``(extension, offset, size)`` of the sample's image: its first member with one of
    ``image_exts``; ValueError names the shard and key where there is none or the key merges
    dotted members."""
    images = [m for m in members if m[0] in image_exts or m[0].rsplit(".", 1)[-1] in image_exts]
    exts = [m[0] for m in members]
    if (len(images) > 1 and any("." in m[0] for m in images)) or (
        not labelled and "cls" not in exts and any(e.endswith(".cls") for e in exts)
    ):
        raise ValueError(_dotted_key_message(url, key, exts, [m[0] for m in images]))
    if images:
        ext, offset, size = images[0]
        return ext, int(offset), int(size)
    have = ", ".join(f"{key}.{m[0]}" for m in members)
    raise ValueError(
        f"TarShards: shard {url!r}, key {key!r} has no image member "
        f"(extensions {', '.join(image_exts)}); its members: {have}"
    )


def shard_members(
    url: str, samples: list, image_exts: Sequence[str], label: Callable[[str], int] | None = None
) -> ShardMembers:
    """The samples of a shard's member index (``[[key, members, cls_text|None], ...]``)."""
    n = len(samples)
    names, offsets, sizes, labels = [], np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
    for j, (key, members, cls) in enumerate(samples):
        ext, offsets[j], sizes[j] = image_member(url, key, members, image_exts, label is not None)
        names.append(f"{key}.{ext}")
        if label is not None:
            labels[j] = _call_label(label, url, key)
        else:
            labels[j] = _parse_cls(url, key, cls) if cls is not None else -1
    return ShardMembers(tuple(names), offsets, sizes, labels)


def check_index_cache(capacity: int) -> int:
    """``capacity`` (TarShards' ``index_cache``), or ValueError saying what to write."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(
            f"TarShards: index_cache must be an int >= 1 (shards whose member tables each "
            f"process keeps), got {capacity!r}; write e.g. index_cache=64"
        )
    return capacity


class MemberCache:
    """``get(s)``: shard ``s``'s `ShardMembers`, loaded by ``load(s)`` when not held;
    at most ``capacity`` shards held, least recently used dropped first."""

    def __init__(self, load: Callable[[int], ShardMembers], capacity: int):
        self._load, self.capacity = load, check_index_cache(capacity)
        self._lock = threading.Lock()
        self._held: OrderedDict[int, ShardMembers] = OrderedDict()
        self.loads = 0  # shards loaded (sidecar, cache file or scan) by this process
        _caches.add(self)

    def _forget(self) -> None:
        """In a forked child: a fresh lock (a parent thread may have held this one)."""
        self._lock = threading.Lock()

    def get(self, s: int) -> ShardMembers:
        with self._lock:
            got = self._held.get(s)
            if got is not None:
                self._held.move_to_end(s)
                return got
        got = self._load(s)  # outside the lock: other threads read other shards meanwhile
        self.put(s, got)
        return got

    def put(self, s: int, members: ShardMembers) -> None:
        with self._lock:
            self.loads += 1
            self._held[s] = members
            self._held.move_to_end(s)
            while len(self._held) > self.capacity:
                self._held.popitem(last=False)

    def held(self) -> list[int]:
        """The shards held, least recently used first."""
        with self._lock:
            return list(self._held)


_caches: "weakref.WeakSet[MemberCache]" = weakref.WeakSet()


def _forget_all() -> None:
    for cache in list(_caches):
        cache._forget()


os.register_at_fork(after_in_child=_forget_all)
