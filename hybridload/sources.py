"""Sources describe samples without reading them.

A source has ``len()``, ``ref(i)`` (a small picklable :class:`SampleRef`) and
``read(ref)``, which returns the encoded bytes (or an already decoded image) and is
called by whoever processes the sample, on the node where it runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .errors import SampleError

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class SampleRef:
    """Where one sample lives: its dataset index, a location and its label."""

    index: int
    location: str
    label: int


class Source:
    """Base class: subclasses implement ``__len__``, ``ref`` and ``read``."""

    def __len__(self) -> int:
        raise NotImplementedError

    def ref(self, index: int) -> SampleRef:
        raise NotImplementedError

    def read(self, ref: SampleRef) -> tuple[Any, int]:
        """Return ``(payload, label)``: the encoded bytes or a decoded image (PIL image,
        HWC uint8 array, CHW uint8 tensor), and the sample's label."""
        raise NotImplementedError

    def _check_index(self, index: int) -> int:
        n = len(self)
        if not 0 <= index < n:
            raise IndexError(f"{type(self).__name__}: index {index} out of range for {n} samples")
        return int(index)


def _read_file(ref: SampleRef) -> bytes:
    try:
        with open(ref.location, "rb") as f:
            return f.read()
    except OSError as exc:
        raise SampleError(ref.index, ref.location, "read", f"{type(exc).__name__}: {exc.strerror or exc}") from None


class FileList(Source):
    """Samples from a list of file paths and integer labels."""

    def __init__(self, paths: Sequence[str | os.PathLike], labels: Sequence[int] | None = None):
        self.paths = [os.fspath(p) for p in paths]
        if labels is None:
            labels = [0] * len(self.paths)
        labels = np.asarray(labels)
        if labels.ndim != 1 or len(labels) != len(self.paths):
            raise ValueError(f"FileList: got {len(self.paths)} paths but {labels.size} labels; give one label per path")
        if len(labels) and not np.issubdtype(labels.dtype, np.integer):
            raise ValueError("FileList: labels must be integers (class indices)")
        self._labels = labels.astype(np.int64)

    def __len__(self) -> int:
        return len(self.paths)

    def ref(self, index: int) -> SampleRef:
        i = self._check_index(index)
        return SampleRef(i, self.paths[i], int(self._labels[i]))

    def read(self, ref: SampleRef) -> tuple[bytes, int]:
        return _read_file(ref), ref.label


class ImageFolder(FileList):
    """``root/<class>/<file>`` trees, as torchvision's ImageFolder: classes sorted by name,
    files sorted within each class, label = class position."""

    def __init__(self, root: str | os.PathLike, extensions: Sequence[str] = IMG_EXTENSIONS):
        root_path = Path(root)
        if not root_path.is_dir():
            raise FileNotFoundError(f"ImageFolder: root {str(root_path)!r} is not a directory")
        exts = tuple(e.lower() for e in extensions)
        self.root = str(root_path)
        self.classes = sorted(e.name for e in os.scandir(root_path) if e.is_dir())
        if not self.classes:
            raise FileNotFoundError(f"ImageFolder: no class folders under {self.root!r}; "
                                    "expected root/<class>/<image files>")
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        paths, labels = [], []
        for c in self.classes:
            for dirpath, _dirs, files in sorted(os.walk(root_path / c, followlinks=True)):
                for name in sorted(files):
                    if name.lower().endswith(exts):
                        paths.append(os.path.join(dirpath, name))
                        labels.append(self.class_to_idx[c])
        if not paths:
            raise FileNotFoundError(f"ImageFolder: no image files ({', '.join(exts)}) under {self.root!r}")
        super().__init__(paths, labels)


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
