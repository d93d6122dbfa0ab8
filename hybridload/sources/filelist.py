"""FileList: samples from a list of file paths (or fsspec URLs) and integer labels."""

from __future__ import annotations

import os
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from hybridload.sources._base import SampleRef, Source, check_protocols, is_url, read_file
from hybridload.sources.read_retry import ReadRetry
from hybridload.sources.reads import DEFAULT_IO_THREADS, check_io_threads, ordered_reads


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
        check_protocols(self.paths, self.storage_options)

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
