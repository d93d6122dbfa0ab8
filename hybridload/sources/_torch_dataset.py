"""TorchDataset: any map-style dataset as a source (the Dpex-style generic mode)."""

from __future__ import annotations

import threading
from typing import Any

from hybridload.errors import SampleError

from hybridload.sources._base import SampleRef, Source, to_label

#: the label of a sample whose ``ds[i]`` raised under ``on_error="skip"`` (its label could
#: not be read): torch's ``CrossEntropyLoss`` ignores it by default (``ignore_index=-100``).
UNREAD_LABEL = -100


class TorchDataset(Source):
    """Any map-style dataset whose ``ds[i]`` returns ``(image, label)`` (or just an image).

    The image may be encoded bytes, a PIL image, an HWC uint8 array or a CHW uint8
    tensor; the label an int (Python, numpy, or a one-element integer tensor). Any other
    label (a string, a float, a one-hot vector) raises `LabelError`
    naming the sample, under ``on_error="skip"`` too. A dataset returning just an image
    gives label -1.

    Under ``on_error="skip"`` a sample that fails after ``ds[i]`` returned (its image
    does not decode) keeps its real label; a sample whose ``ds[i]`` itself raised has no
    label to keep and gets `UNREAD_LABEL` (-100, which ``CrossEntropyLoss`` ignores
    by default). ``stats()["skipped_samples"]`` lists both.

    The dataset object travels with the source, so it must be picklable to be used by
    remote workers.

    Args:
        dataset: the map-style dataset.
        name: how errors name it; default its class name.
    """

    def __init__(self, dataset: Any, name: str | None = None):
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise TypeError("TorchDataset: the dataset must be map-style (define __len__ and __getitem__)")
        self.dataset = dataset
        self.name = name or type(dataset).__name__
        self._last = threading.local()  # (index, label) of this thread's last read

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_last"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._last = threading.local()

    def __len__(self) -> int:
        return len(self.dataset)

    def fingerprint(self) -> str:
        """The dataset's name and size: a state of another kind of source, or of a dataset of
        another class, is refused (the samples themselves are the dataset's own business)."""
        return f"TorchDataset; dataset: {self.name}; samples: {len(self)}"

    def ref(self, index: int) -> SampleRef:
        i = self._check_index(index)
        last = getattr(self._last, "read", None)
        label = last[1] if last is not None and last[0] == i else UNREAD_LABEL
        return SampleRef(i, f"{self.name}[{i}]", label)

    def read(self, ref: SampleRef) -> tuple[Any, int]:
        self._last.read = None
        try:
            item = self.dataset[ref.index]
        except Exception as exc:  # the user's dataset: report and wrap whatever it raised
            raise SampleError(ref.index, ref.location, "read", f"{type(exc).__name__}: {exc}") from exc
        if isinstance(item, (tuple, list)) and len(item) == 2:
            label = to_label(item[1], ref.index, ref.location)
        else:
            item, label = (item,), -1
        self._last.read = (ref.index, label)
        return item[0], label
