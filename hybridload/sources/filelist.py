"""FileList: samples from a list of file paths (or fsspec URLs) and integer labels."""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np

from ._base import SampleRef, Source, check_protocols, read_file


class FileList(Source):
    """Samples from a list of file paths (or fsspec URLs) and integer labels.

    Args:
        paths: local paths or fsspec URLs (``memory://...``, ``s3://bucket/key``, ...).
        labels: one integer class index per path; default all 0.
        storage_options: keyword arguments for the fsspec filesystem of URL paths (for
            example ``{"anon": True}`` for public S3 buckets). They travel with the source
            to remote workers, so prefer credentials from the environment over secrets here.
    """

    def __init__(self, paths: Sequence[str | os.PathLike], labels: Sequence[int] | None = None, *,
                 storage_options: Mapping[str, Any] | None = None):
        self.storage_options = dict(storage_options or {})
        self.paths = [os.fspath(p) for p in paths]
        if labels is None:
            labels = [0] * len(self.paths)
        labels = np.asarray(labels)
        if labels.ndim != 1 or len(labels) != len(self.paths):
            raise ValueError(f"FileList: got {len(self.paths)} paths but {labels.size} labels; give one label per path")
        if len(labels) and not np.issubdtype(labels.dtype, np.integer):
            values = labels.tolist()
            bad = next((i for i, v in enumerate(values) if not (isinstance(v, float) and v.is_integer())), 0)
            raise ValueError(f"FileList: labels must be integers (class indices); sample {bad} "
                             f"({self.paths[bad]}) has label {values[bad]!r} ({labels.dtype})")
        self._labels = labels.astype(np.int64)
        check_protocols(self.paths, self.storage_options)

    def __len__(self) -> int:
        return len(self.paths)

    def ref(self, index: int) -> SampleRef:
        i = self._check_index(index)
        return SampleRef(i, self.paths[i], int(self._labels[i]))

    def read(self, ref: SampleRef) -> tuple[bytes, int]:
        return read_file(ref, self.storage_options), ref.label
