"""Tar shards in the WebDataset layout, read by random access through a member index.

A shard is an uncompressed tar file whose members are grouped into samples by key: the
member name up to the first dot of its basename (``train/n0144_17.jpg`` → key
``train/n0144_17``, extension ``jpg``), as WebDataset does. A sample's image is its first
member (in tar order) with an image extension; its label comes from a ``.cls`` member
(integer text) or from a ``label(key)`` function.

Each shard is scanned once with :mod:`tarfile` into a member index — per key, the
``(extension, offset of the data, size)`` of its members — cached in memory for the
process and, with ``cache_dir``, as a JSON file keyed by shard URL, size and modification
time. Reading a sample is then one ranged read of exactly its image bytes: no scan, no
open tar object, nothing but plain data in the pickled source.

Sample order: shards in the given order, keys in tar order (first appearance).

``read="shard"`` streams shards instead: a worker reads each shard it needs whole, with one
request, keeps the last few (:mod:`.shard_cache`) and cuts samples out of them; the source
then asks for the shard-aware epoch order (:mod:`hybridload.sampling.shard_order`) so that a worker
needs only a few shards at a time.
"""

from __future__ import annotations

import logging
import numbers
import os
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from hybridload.errors import SampleError

from hybridload.sampling.shard_order import ShardOrder

from hybridload.sources._base import SampleRef, Source, is_url, read_bytes, read_failure
from hybridload.sources.read_retry import with_retries
from hybridload.sources.braces import expand_urls
from hybridload.sources.reads import DEFAULT_IO_THREADS, check_io_threads, ordered_reads
from hybridload.sources.shard_cache import ShardCache
from hybridload.sources.tar_index import shard_index, split_member_name

log = logging.getLogger(__name__)

IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")


def _parse_cls(url: str, key: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"TarShards: shard {url!r}, key {key!r}: {key}.cls holds {text[:40]!r}, "
                         "not an integer class index") from None


def _call_label(label: Callable[[str], int], url: str, key: str) -> int:
    try:
        value = label(key)
    except Exception as exc:  # the user's function: say which key it failed on
        raise ValueError(f"TarShards: label({key!r}) for shard {url!r} raised "
                         f"{type(exc).__name__}: {exc}") from exc
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise ValueError(f"TarShards: label({key!r}) for shard {url!r} returned {value!r}; "
                         "it must return an int class index")
    return int(value)


def _dotted_key_message(url: str, key: str, exts: list[str], images: list[str]) -> str:
    """The error for members that WebDataset's key rule merges: dots inside the sample keys."""
    names = ", ".join(f"{key}.{e}" for e in exts[:6]) + (", ..." if len(exts) > 6 else "")
    dotted = next(e for e in exts if "." in e).rsplit(".", 1)[0]
    pick = (f", or, for one sample with several images, name the one to use in full: image_exts=({images[0]!r},)"
            if len(images) > 1 else "")
    return (f"TarShards: shard {url!r}, key {key!r} groups the members {names}: a key ends at the first dot "
            f"of the member's basename (as in WebDataset), so keys with dots such as {key + '.' + dotted!r} "
            f"merge samples into one or lose their .cls label (webdataset's own to_tuple fails on them too). "
            f"Rewrite the shards with keys without dots (e.g. {key + '_' + dotted.replace('.', '_')!r}){pick}")


class TarShards(Source):
    """WebDataset-layout tar shards with random access through a member index.

    Args:
        urls: a brace pattern (``"train-{000000..000099}.tar"``) or a list of shard paths
            or fsspec URLs (each entry may hold braces too).
        label: a function ``key -> int``; default: the integer in the sample's ``.cls``
            member, or -1 where a sample has none.
        image_exts: extensions that mark the image member (the first in tar order wins).
        cache_dir: a local directory for the member indexes as JSON files, keyed by shard
            URL, size and modification time (a changed shard is scanned again).
        storage_options: fsspec options for URL shards (see :class:`FileList`).
        io_threads: reads in flight at once while a worker reads a batch (see
            :class:`FileList`; default 32 for URL shards, 1 for local ones).
        read: ``"sample"`` (default): one ranged read per sample, any order. ``"shard"``:
            shard streaming — each worker reads whole shards (one request each) and serves
            their samples; the epoch order becomes shard-aware (shards shuffled, samples
            shuffled within blocks of ``buffer_shards`` shards; ranks take contiguous spans).
        buffer_shards: with ``read="shard"``, the shards whose samples are shuffled together.
        cache_shards: with ``read="shard"``, the shards each worker process keeps (default
            ``2 * buffer_shards + 2``); its memory is this many shards.

    A sample's location (in refs and errors) is ``"<shard>#<member name>"``.

    Raises:
        ValueError: no shards; a key without an image member; a bad ``.cls``; a key whose
            members hold several images or a dotted ``.cls`` (``img.000.jpg``,
            ``img.001.jpg``: dots inside the keys, which WebDataset's key rule merges); a
            compressed or damaged shard; no samples at all. Each names the shard and key.
        FileNotFoundError: a shard that does not exist, named.
    """

    def __init__(self, urls: str | os.PathLike | Sequence[str | os.PathLike], label: Callable[[str], int] | None = None,
                 image_exts: Sequence[str] = IMAGE_EXTS, cache_dir: str | os.PathLike | None = None, *,
                 storage_options: Mapping[str, Any] | None = None, io_threads: int | None = None,
                 read: str = "sample", buffer_shards: int = 4, cache_shards: int | None = None):
        if read not in ("sample", "shard"):
            raise ValueError(f"TarShards: read must be 'sample' (a ranged read per sample) or 'shard' "
                             f"(whole shards, shard-aware order), got {read!r}")
        if cache_shards is not None and (isinstance(cache_shards, bool) or not isinstance(cache_shards, int)
                                         or cache_shards < 1):
            raise ValueError(f"TarShards: cache_shards must be None or an int >= 1, got {cache_shards!r}; "
                             f"write e.g. cache_shards={2 * buffer_shards + 2}")
        self.read_mode = read
        self.urls = expand_urls(urls)
        if not self.urls:
            raise ValueError("TarShards: no shards given; pass a brace pattern such as "
                             "'train-{000000..000099}.tar' or a non-empty list of shard paths/URLs")
        if isinstance(image_exts, str):
            image_exts = (image_exts,)
        self.image_exts = tuple(e.lower().lstrip(".") for e in image_exts)
        if not self.image_exts:
            raise ValueError("TarShards: image_exts is empty; give the extensions of the image members")
        if label is not None and not callable(label):
            raise TypeError(f"TarShards: label must be a function key -> int, got {type(label).__name__}")
        self.storage_options = dict(storage_options or {})
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        shard_ids, offsets, sizes, labels, self._members = [], [], [], [], []
        self.shard_sizes: list[int] = []
        for s, url in enumerate(self.urls):
            samples = shard_index(url, self.storage_options, self.cache_dir)
            for key, members, cls in samples:
                ext, offset, size = self._image_member(url, key, members, label is not None)
                shard_ids.append(s)
                offsets.append(offset)
                sizes.append(size)
                self._members.append(f"{key}.{ext}")
                if label is not None:
                    labels.append(_call_label(label, url, key))
                else:
                    labels.append(_parse_cls(url, key, cls) if cls is not None else -1)
            self.shard_sizes.append(len(samples))
            if not samples:
                log.warning("TarShards: shard %r holds no samples", url)
        if not offsets:
            raise ValueError(f"TarShards: the {len(self.urls)} shard(s) hold no samples "
                             f"(first: {self.urls[0]!r}); expected members named <key>.<ext>")
        self._shard = np.asarray(shard_ids, dtype=np.int32)
        self._offset = np.asarray(offsets, dtype=np.int64)
        self._size = np.asarray(sizes, dtype=np.int64)
        self._labels = np.asarray(labels, dtype=np.int64)
        self._order = ShardOrder(tuple(self.shard_sizes), buffer_shards)  # validates buffer_shards
        io_threads = check_io_threads(io_threads, "TarShards")
        self.io_threads = io_threads if io_threads is not None else (
            DEFAULT_IO_THREADS if any(is_url(u) for u in self.urls) else 1)
        self.cache_shards = cache_shards if cache_shards is not None else 2 * buffer_shards + 2
        self._new_cache()

    def _new_cache(self) -> None:
        self._shards = ShardCache(self._fetch_shard, self.cache_shards)

    def _fetch_shard(self, url: str) -> bytes:
        # the whole shard: one request, retried as the source's read_retry says
        return with_retries(lambda: read_bytes(url, self.storage_options), self.read_retry, url)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_shards"]  # each process (each Ray actor) holds its own shards
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._new_cache()

    def sample_order(self) -> ShardOrder | None:
        """The shard-aware order with ``read="shard"``; None (the default order) otherwise."""
        return self._order if self.read_mode == "shard" else None

    @property
    def shard_fetches(self) -> int:
        """Whole-shard reads this process started (``read="shard"``)."""
        return self._shards.fetches

    def cached_shards(self) -> list[str]:
        """The shards this process holds (``read="shard"``), least recently used first."""
        return self._shards.cached()

    def _image_member(self, url: str, key: str, members: list, labelled: bool = False) -> tuple[str, int, int]:
        images = [m for m in members if m[0] in self.image_exts or m[0].rsplit(".", 1)[-1] in self.image_exts]
        exts = [m[0] for m in members]
        if (len(images) > 1 and any("." in m[0] for m in images)) or \
                (not labelled and "cls" not in exts and any(e.endswith(".cls") for e in exts)):
            raise ValueError(_dotted_key_message(url, key, exts, [m[0] for m in images]))
        if images:
            ext, offset, size = images[0]
            return ext, int(offset), int(size)
        have = ", ".join(f"{key}.{m[0]}" for m in members)
        raise ValueError(f"TarShards: shard {url!r}, key {key!r} has no image member "
                         f"(extensions {', '.join(self.image_exts)}); its members: {have}")

    def __len__(self) -> int:
        return len(self._offset)

    def keys(self) -> list[str]:
        """Sample keys in index order (keys repeat across shards only if the shards do)."""
        return [split_member_name(m)[0] for m in self._members]

    def ref(self, index: int) -> SampleRef:
        i = self._check_index(index)
        return SampleRef(i, f"{self.urls[self._shard[i]]}#{self._members[i]}", int(self._labels[i]))

    def read(self, ref: SampleRef) -> tuple[bytes, int]:
        if self.read_mode == "shard":
            return self._cut(ref, self._shards.get(self.urls[self._shard[self._check_index(ref.index)]]))
        i = self._check_index(ref.index)
        url, offset, size = self.urls[self._shard[i]], int(self._offset[i]), int(self._size[i])
        try:
            data = with_retries(lambda: read_bytes(url, self.storage_options, offset=offset, size=size),
                                self.read_retry, ref.location)
        except Exception as exc:  # any filesystem's error: name the sample
            raise read_failure(ref, exc) from None
        return self._checked(ref, data, offset, size), ref.label

    def read_many(self, refs: Sequence[SampleRef]) -> Iterator[Any]:
        """The reads of ``refs`` in order: ``io_threads`` ranged reads in flight, or with
        ``read="shard"`` the batch's shards fetched at once (each whole, once per process
        while cached) and its samples cut from them."""
        if self.read_mode != "shard":
            return ordered_reads(self.read, refs, self.io_threads)
        return self._serve(refs)

    def _serve(self, refs: Sequence[SampleRef]) -> Iterator[Any]:
        shards = {}
        for ref in refs:  # start every shard's fetch before waiting for any
            url = self.urls[self._shard[self._check_index(ref.index)]]
            if url not in shards:
                shards[url] = self._shards.get(url)
        for ref in refs:
            try:
                yield self._cut(ref, shards[self.urls[self._shard[ref.index]]])
            except SampleError as exc:
                yield exc

    def _cut(self, ref: SampleRef, shard) -> tuple[bytes, int]:
        """The sample's image bytes out of its shard's fetched bytes (a future)."""
        i = ref.index
        offset, size = int(self._offset[i]), int(self._size[i])
        try:
            whole = shard.result()
        except Exception as exc:  # any filesystem's error: name the sample
            raise read_failure(ref, exc) from None
        return self._checked(ref, whole[offset:offset + size], offset, size), ref.label

    @staticmethod
    def _checked(ref: SampleRef, data: bytes, offset: int, size: int) -> bytes:
        if len(data) != size:
            raise SampleError(ref.index, ref.location, "read",
                              f"got {len(data)} of {size} bytes at offset {offset}: the shard is shorter than "
                              "when its index was built (changed or truncated?)")
        return data
