"""A dataset's shards and counts in O(shards) memory, the URLs one byte string, pickled with
zlib, so 10^6 shards ship to each worker in a few MB."""

from __future__ import annotations

import os
import zlib
from typing import Iterator, Sequence, cast

import numpy as np


class ShardList:
    """Shard URLs and sample counts; sample ``i`` lives in shard ``shard_of(i)``.

    Args:
        urls: the shard URLs, in the dataset's order.
        counts: samples per shard.
    """

    def __init__(self, urls: Sequence[str], counts: Sequence[int] | np.ndarray):
        lengths = np.fromiter(
            (len(u.encode("utf-8", "surrogateescape")) for u in urls), dtype=np.int64, count=len(urls)
        )
        self._set(
            "".join(urls).encode("utf-8", "surrogateescape"), lengths, np.asarray(counts, dtype=np.int64).reshape(-1)
        )
        if len(self.counts) != len(lengths):
            raise ValueError(f"ShardList: {len(lengths)} URLs but {len(self.counts)} counts")

    def _set(self, blob: bytes, lengths: np.ndarray, counts: np.ndarray) -> None:
        self._blob = blob
        self._ends = np.cumsum(lengths, dtype=np.int64)
        self.counts = counts
        #: index of each shard's first sample, and the total at the end
        self.starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        self._packed: tuple[bytes, bytes, bytes] | None = None  # the compressed state, made at the first pickling
        self._fingerprint: str | None = None

    def __len__(self) -> int:
        return len(self.counts)

    @property
    def total(self) -> int:
        """Samples in all shards."""
        return int(self.starts[-1])

    def url(self, s: int) -> str:
        """Shard ``s``'s URL."""
        begin = int(self._ends[s - 1]) if s > 0 else 0
        return self._blob[begin : int(self._ends[s])].decode("utf-8", "surrogateescape")

    def __iter__(self) -> Iterator[str]:
        return (self.url(s) for s in range(len(self)))

    def fingerprint(self) -> str:
        """What identifies this dataset's order beyond its size: the shards' names and counts, in
        order (a crc32), each name taken below the directory all shards share, so that a dataset
        moved with its manifest keeps its fingerprint while reordered or other shards do not."""
        if self._fingerprint is None:
            blob, ends = self._blob, self._ends.tolist()  # once per process
            names = [blob[b:e] for b, e in zip([0] + ends[:-1], ends)]
            # the common prefix of all is theirs (bytes: typeshed's "" is for an empty list, never this one)
            cut = cast(bytes, os.path.commonprefix([min(names), max(names)])).rfind(b"/") + 1
            crc = zlib.crc32(b"\0".join([n[cut:] for n in names]), zlib.crc32(self.counts.tobytes()))
            self._fingerprint = f"{len(self)} shards, {self.total} samples (names and counts crc32 {crc:08x})"
        return self._fingerprint

    def shard_of(self, index: int) -> tuple[int, int]:
        """``(shard, position in the shard)`` of sample ``index`` (0 <= index < total)."""
        s = int(np.searchsorted(self.starts, index, side="right")) - 1
        return s, int(index - self.starts[s])

    def __getstate__(self) -> dict:
        if self._packed is None:
            lengths = np.diff(self._ends, prepend=0).astype(np.int64)
            self._packed = (
                zlib.compress(self._blob, 6),
                zlib.compress(lengths.tobytes(), 6),
                zlib.compress(self.counts.tobytes(), 6),
            )
        return {"packed": self._packed}

    def __setstate__(self, state: dict) -> None:
        blob, lengths, counts = state["packed"]
        self._set(
            zlib.decompress(blob),
            np.frombuffer(zlib.decompress(lengths), dtype=np.int64),
            np.frombuffer(zlib.decompress(counts), dtype=np.int64).copy(),
        )
        self._packed = state["packed"]
