"""FileList: samples from a list of file paths (or fsspec URLs) and integer labels."""

from __future__ import annotations

import hashlib
import os
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from hybridload.sources._base import SampleRef, Source, check_protocols, is_url, read_file
from hybridload.sources._read_retry import ReadRetry
from hybridload.sources._reads import DEFAULT_IO_THREADS, check_io_threads, ordered_reads


class FileList(Source):
    """Samples from a list of file paths (or fsspec URLs) and integer labels.

    Args:
        paths: local paths or fsspec URLs (``memory://...``, ``s3://bucket/key``, ...).
        labels: one integer class index per path; default all 0.
        storage_options: keyword arguments for the fsspec filesystem of URL paths (for
            example ``{"anon": True}`` for public S3 buckets). They travel with the source
            to remote workers, so prefer credentials from the environment over secrets here.
        io_threads: reads in flight at once while a worker reads a batch (1: one after
            another). Default: 32 when any path is a URL (object storage latency then
            overlaps), 1 for local paths.
        read_retry: how a read that fails for a reason other than the sample's (a connection
            refused, a timeout) is retried before it raises
            `StorageError`; None: ``ReadRetry()``.
    """

    def __init__(
        self,
        paths: Sequence[str | os.PathLike],
        labels: Sequence[int] | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
        io_threads: int | None = None,
        read_retry: ReadRetry | None = None,
    ):
        if read_retry is not None and not isinstance(read_retry, ReadRetry):
            raise ValueError(
                f"FileList: read_retry must be None or a ReadRetry, got {read_retry!r}; "
                "write e.g. read_retry=sources.ReadRetry(attempts=6)"
            )
        self.read_retry = read_retry or self.read_retry
        self.storage_options = dict(storage_options or {})
        self.paths = [os.fspath(p) for p in paths]
        io_threads = check_io_threads(io_threads, type(self).__name__)
        self.io_threads = (
            io_threads if io_threads is not None else (DEFAULT_IO_THREADS if any(is_url(p) for p in self.paths) else 1)
        )
        given = np.asarray([0] * len(self.paths) if labels is None else labels)
        if given.ndim != 1 or len(given) != len(self.paths):
            raise ValueError(f"FileList: got {len(self.paths)} paths but {given.size} labels; give one label per path")
        if len(given) and not np.issubdtype(given.dtype, np.integer):
            values = given.tolist()
            bad = next((i for i, v in enumerate(values) if not (isinstance(v, float) and v.is_integer())), 0)
            raise ValueError(
                f"FileList: labels must be integers (class indices); sample {bad} "
                f"({self.paths[bad]}) has label {values[bad]!r} ({given.dtype})"
            )
        self._labels = given.astype(np.int64)
        self._fingerprint: str | None = None  # made when a state first asks for it
        check_protocols(self.paths, self.storage_options)

    def fingerprint(self) -> str:
        """The kind, the file count and digests of the paths below their common directory (a
        dataset moved keeps it) and of the labels, made once."""
        if self._fingerprint is None:
            common = os.path.commonprefix([min(self.paths), max(self.paths)]) if self.paths else ""
            cut = common.rfind("/") + 1  # the directory all share, as a prefix of whole names
            self._fingerprint = (
                f"{type(self).__name__}; files: {len(self.paths)}; paths: sha1 {names_digest(p[cut:] for p in self.paths)}; "
                f"labels: sha1 {hashlib.sha1(self._labels.tobytes()).hexdigest()[:12]}"
            )
        return self._fingerprint

    def __len__(self) -> int:
        return len(self.paths)

    def ref(self, index: int) -> SampleRef:
        i = self._check_index(index)
        return SampleRef(i, self.paths[i], int(self._labels[i]))

    def read(self, ref: SampleRef) -> tuple[bytes, int]:
        return read_file(ref, self.storage_options, self.read_retry), ref.label

    def read_many(self, refs: Sequence[SampleRef]) -> Iterator[Any]:
        """The reads of ``refs`` in order, ``io_threads`` of them in flight at once."""
        return ordered_reads(self.read, refs, self.io_threads)


def names_digest(names: Iterable[str]) -> str:
    """A short digest of ``names`` in order (what a fingerprint records of a source's paths)."""
    h = hashlib.sha1()
    for name in names:
        h.update(name.encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()[:12]
