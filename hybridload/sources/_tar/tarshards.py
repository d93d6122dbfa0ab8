"""`TarShards`: WebDataset-layout tar shards read by random access through a member index, the
trainer holding O(shards), each worker the tables of the shards it touched; ``read="shard"``
streams whole shards in the shard-aware order (docs/guide/sources.md)."""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from hybridload.errors import SampleError, ShardIndexError

from hybridload.sampling._shard_order import ShardOrder

from hybridload.sources._base import SampleRef, Source, check_protocols, is_url, read_bytes
from hybridload.sources._read_retry import with_retries
from hybridload.sources._tar.braces import expand_urls
from hybridload.sources._tar.manifest import is_manifest, read_manifest
from hybridload.sources._reads import DEFAULT_IO_THREADS, check_io_threads, ordered_reads
from hybridload.sources._tar.shard_cache import ShardCache
from hybridload.sources._tar.shard_checks import HEADER, checked_member, shard_read_failure
from hybridload.sources._tar.shard_list import ShardList
from hybridload.sources._tar.shard_members import MemberCache, ShardMembers, check_index_cache, shard_members
from hybridload.sources._tar.shard_scan import scan_counts
from hybridload.sources._tar.tar_options import IMAGE_EXTS, check_options
from hybridload.sources._tar.tar_index import shard_index, split_member_name


class TarShards(Source):
    """WebDataset-layout tar shards with random access through a member index per shard.

    Args:
        urls: the path or URL of a shard manifest (``manifest.json``: wids'
            ``{"wids_version": 1, "shardlist": [{"url": ..., "nsamples": ...}, ...]}``, as
            ``hybridload index`` writes it; only its 0-count shards touched), or a brace
            pattern (``"train-{000000..000099}.tar"``) or a list of shard paths or fsspec URLs
            (each entry may hold braces too; a local glob such as ``"train/*.tar"`` is expanded,
            sorted), each shard scanned once at construction.
        label: a function ``key -> int``; default: the integer in the sample's ``.cls``
            member, or -1 where a sample has none. It travels to the workers with the source
            (labels are read there), so with spawned worker processes it must be picklable
            (a module-level function; Ray actors take lambdas too).
        image_exts: extensions that mark the image member (the first in tar order wins).
        cache_dir: a local directory for the member indexes as JSON files, keyed by shard
            URL, size and modification time (a changed shard is scanned again). A sidecar
            ``<shard>.members.json`` next to a shard (``hybridload index``) is used first.
        storage_options: fsspec options for URL shards (see `FileList`).
        io_threads: reads in flight at once while a worker reads a batch (see
            `FileList`; default 32 for URL shards, 1 for local ones).
        read: ``"sample"`` (default): one ranged read per sample, any order. ``"shard"``:
            shard streaming — each worker reads whole shards (one request each) and serves
            their samples; the epoch order becomes shard-aware (shards shuffled, samples
            shuffled within blocks of ``buffer_shards`` shards; ranks take contiguous spans).
        buffer_shards: with ``read="shard"``, the shards whose samples are shuffled together.
        cache_shards: with ``read="shard"``, the shards each worker process keeps (default
            ``2 * buffer_shards + 2``); its memory is this many shards.
        index_cache: the shards whose member tables each process keeps (least recently used
            dropped first); a process's per-sample memory is bounded by this many shards.

    A sample's location (in refs and errors) is ``"<shard>#<member name>"``.

    Raises:
        ManifestError: a manifest that is missing, not JSON, or malformed, named.
        ValueError: no shards; a shard named twice, under one spelling or two (``sub/s0.tar``
            and ``sub/./s0.tar``, a symlink and its target, a path and its ``file://`` URL),
            naming both entries; a key without an image member; a bad ``.cls``; a key whose
            members hold several images or a dotted ``.cls`` (``img.000.jpg``,
            ``img.001.jpg``: dots inside the keys, which WebDataset's key rule merges); a
            compressed or damaged shard; no samples at all. Each names the shard and key.
            With a manifest these surface when a worker first touches the shard, as
            `ShardIndexError` (so does a missing shard, or a sample count that
            disagrees with the manifest's ``nsamples``).
        FileNotFoundError: a shard of a pattern or list that does not exist, named; a glob
            that matches no file.
    """

    def __init__(
        self,
        urls: str | os.PathLike | Sequence[str | os.PathLike],
        label: Callable[[str], int] | None = None,
        image_exts: Sequence[str] = IMAGE_EXTS,
        cache_dir: str | os.PathLike | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
        io_threads: int | None = None,
        read: str = "sample",
        buffer_shards: int = 4,
        cache_shards: int | None = None,
        index_cache: int = 64,
    ):
        self.image_exts = check_options(read, buffer_shards, cache_shards, image_exts, label)
        self.read_mode, self.buffer_shards = read, buffer_shards
        self.label = label
        self.storage_options = dict(storage_options or {})
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        self.cache_shards = cache_shards if cache_shards is not None else 2 * buffer_shards + 2
        self.index_cache = index_cache
        check_index_cache(index_cache)
        #: the manifest the source was built from (None: a pattern or list, scanned)
        self.manifest = os.fspath(urls) if is_manifest(urls) else None
        if self.manifest is not None:
            shard_urls, counts = read_manifest(self.manifest, self.storage_options)
            check_protocols(shard_urls, self.storage_options)  # an unknown protocol: now, not per shard
            self._list = ShardList(shard_urls, counts)
            self._new_cache()
            for s in np.flatnonzero(self._list.counts == 0):  # a 0 owns no index: checked now or never
                self._load_members(int(s))
        else:
            shard_urls = self._scan_all(expand_urls(urls))
        if self._list.total == 0:
            raise ValueError(
                f"TarShards: the {len(self._list)} shard(s) hold no samples "
                f"(first: {self._list.url(0)!r}); expected members named <key>.<ext>"
            )
        io_threads = check_io_threads(io_threads, "TarShards")
        self.io_threads = (
            io_threads if io_threads is not None else (DEFAULT_IO_THREADS if any(is_url(u) for u in shard_urls) else 1)
        )

    def _scan_all(self, urls: list[str]) -> list[str]:
        """Count (and check) each shard of a pattern or list by its member index (`shard_scan`)."""
        self._list = ShardList(urls, [0] * len(urls))
        self._new_cache()  # the last index_cache shards' tables stay held
        counts = scan_counts(urls, self.storage_options, self.cache_dir, self.image_exts, self.label, self._members.put)
        self._list = ShardList(urls, counts)
        return urls

    def _new_cache(self) -> None:
        self._shards = ShardCache(self._fetch_shard, self.cache_shards)
        self._members = MemberCache(self._load_members, self.index_cache)

    def _fetch_shard(self, url: str) -> bytes:
        # the whole shard: one request, retried as the source's read_retry says
        return with_retries(lambda: read_bytes(url, self.storage_options), self.read_retry, url)

    def _where(self, s: int) -> str:
        of = f"manifest {self.manifest!r}" if self.manifest is not None else "the shards given"
        return f"shard {s} ({self._list.url(s)!r}) of {of}"

    def _load_members(self, s: int) -> ShardMembers:
        """Shard ``s``'s member table, checked against its count: the first touch in a process."""
        url, want = self._list.url(s), int(self._list.counts[s])
        # streaming shards: without a sidecar, scan the whole-shard read the samples need anyway
        fetch = (lambda: self._shards.get(url).result()) if self.read_mode == "shard" else None
        try:
            members = shard_members(
                url, shard_index(url, self.storage_options, self.cache_dir, fetch=fetch), self.image_exts, self.label
            )
        except (OSError, ValueError) as exc:
            raise ShardIndexError(self._where(s), f"{type(exc).__name__}: {exc}") from None
        if len(members) != want:
            told = "the manifest says" if self.manifest is not None else "it held when the source was built:"
            raise ShardIndexError(
                self._where(s),
                f"the shard holds {len(members)} samples but {told} "
                f"nsamples={want}; reading on would give a short or shifted epoch. Rebuild the "
                "manifest (`hybridload index PATTERN -o manifest.json`) after changing shards",
            )
        return members

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_shards"], state["_members"]  # each process (each Ray actor) holds its own
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._new_cache()

    @property
    def urls(self) -> list[str]:
        """The shard URLs, in order (a new list: the source keeps them packed)."""
        return list(self._list)

    @property
    def shard_sizes(self) -> list[int]:
        """Samples per shard, in order."""
        return self._list.counts.tolist()

    def sample_order(self) -> ShardOrder | None:
        """The shard-aware order with ``read="shard"``; None (the default order) otherwise."""
        return ShardOrder(tuple(self.shard_sizes), self.buffer_shards) if self.read_mode == "shard" else None

    def fingerprint(self) -> str:
        """The shards' names (below the directory they share) and sample counts, in order, as a
        checksum: a state saved over another manifest or another shard order is refused."""
        return self._list.fingerprint()

    @property
    def shard_fetches(self) -> int:
        """Whole-shard reads this process started (``read="shard"``)."""
        return self._shards.fetches

    def cached_shards(self) -> list[str]:
        """The shards this process holds (``read="shard"``), least recently used first."""
        return self._shards.cached()

    def held_indexes(self) -> list[int]:
        """The shards whose member tables this process holds, least recently used first."""
        return self._members.held()

    def __len__(self) -> int:
        return self._list.total

    def keys(self) -> list[str]:
        """Sample keys in index order (keys repeat across shards only if the shards do); reads
        every shard's member index."""
        return [p[0] for s in range(len(self._list)) for n in self._members.get(s).names if (p := split_member_name(n))]

    def _locate(self, index: int) -> tuple[int, str, ShardMembers, int]:
        s, j = self._list.shard_of(self._check_index(index))
        return s, self._list.url(s), self._members.get(s), j

    def span(self, index: int) -> tuple[str, int, int]:
        """``(shard URL, offset, size)`` of sample ``index``'s image bytes."""
        _, url, members, j = self._locate(index)
        return url, int(members.offsets[j]), int(members.sizes[j])

    def ref(self, index: int) -> SampleRef:
        _, url, members, j = self._locate(index)
        return SampleRef(int(index), f"{url}#{members.names[j]}", int(members.labels[j]))

    def read(self, ref: SampleRef) -> tuple[bytes, int]:
        """The sample's bytes, read with the tar header in front of them and checked against it
        (`shard_checks`): a shard changed, truncated or gone since this process indexed it
        is a `ShardIndexError`, never a skipped sample."""
        s, url, members, j = self._locate(ref.index)
        offset, size = int(members.offsets[j]), int(members.sizes[j])
        if self.read_mode == "shard":
            return self._cut(ref, s, self._shards.get(url), offset, size)
        try:
            data = with_retries(
                lambda: read_bytes(url, self.storage_options, offset=offset - HEADER, size=size + HEADER),
                self.read_retry,
                ref.location,
            )
        except Exception as exc:  # any filesystem's error: name the sample
            raise shard_read_failure(ref, self._where(s), exc) from None
        return checked_member(ref, self._where(s), data, offset, size), ref.label

    def read_many(self, refs: Sequence[SampleRef]) -> Iterator[Any]:
        """The reads of ``refs`` in order: ``io_threads`` ranged reads in flight, or with
        ``read="shard"`` the batch's shards fetched at once (each whole, once per process
        while cached) and its samples cut from them."""
        if self.read_mode != "shard":
            return ordered_reads(self.read, refs, self.io_threads)
        return self._serve(refs)

    def _serve(self, refs: Sequence[SampleRef]) -> Iterator[Any]:
        spans, shards = [self._locate(ref.index) for ref in refs], {}
        for _, url, _, _ in spans:  # start every shard's fetch before waiting for any
            if url not in shards:
                shards[url] = self._shards.get(url)
        for ref, (s, url, members, j) in zip(refs, spans):
            try:
                yield self._cut(ref, s, shards[url], int(members.offsets[j]), int(members.sizes[j]))
            except SampleError as exc:
                yield exc

    def _cut(self, ref: SampleRef, s: int, shard, offset: int, size: int) -> tuple[bytes, int]:
        """The sample's bytes (checked against their tar header) out of its shard's fetched bytes (a future)."""
        try:
            whole = shard.result()
        except Exception as exc:  # any filesystem's error: name the sample
            raise shard_read_failure(ref, self._where(s), exc) from None
        return checked_member(ref, self._where(s), whole[offset - HEADER : offset + size], offset, size), ref.label
