"""TorchDataset: any map-style dataset as a source (the Dpex-style generic mode)."""

from __future__ import annotations

from typing import Any

from hybridload.errors import SampleError

from ._base import SampleRef, Source


class TorchDataset(Source):
    """Any map-style dataset whose ``ds[i]`` returns ``(image, label)`` (or just an image).

    The image may be encoded bytes, a PIL image, an HWC uint8 array or a CHW uint8
    tensor. The dataset object travels with the source, so it must be picklable to be
    used by remote workers.
    """

    def __init__(self, dataset: Any, name: str | None = None):
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise TypeError("TorchDataset: the dataset must be map-style (define __len__ and __getitem__)")
        self.dataset = dataset
        self.name = name or type(dataset).__name__

    def __len__(self) -> int:
        return len(self.dataset)

    def ref(self, index: int) -> SampleRef:
        i = self._check_index(index)
        return SampleRef(i, f"{self.name}[{i}]", -1)

    def read(self, ref: SampleRef) -> tuple[Any, int]:
        try:
            item = self.dataset[ref.index]
        except Exception as exc:  # the user's dataset: report and wrap whatever it raised
            raise SampleError(ref.index, ref.location, "read", f"{type(exc).__name__}: {exc}") from exc
        if isinstance(item, (tuple, list)) and len(item) == 2:
            return item[0], int(item[1])
        return item, -1
