"""Sources describe samples without reading them.

A source has ``len()``, ``ref(i)`` (a small picklable :class:`SampleRef`) and
``read(ref)``, which returns the encoded bytes (or an already decoded image) and is
called by whoever processes the sample, on the node where it runs.

Locations are local paths (read with a plain ``open``) or fsspec URLs (``file://``,
``memory://``, ``s3://``, ``gs://``, chained ``simplecache::s3://...``; read through
``fsspec`` with the source's ``storage_options``). Filesystem objects are never part of a
source's or a ref's pickled state: each process gets its own from fsspec's instance cache
when it first reads.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

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


_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*(://|::)")


def is_url(location: str) -> bool:
    """True for an fsspec URL (``scheme://...`` or a chained ``a::b://...``), False for a
    plain local path, which keeps the fast ``open()`` path."""
    return bool(_URL_RE.match(location))


def url_to_fs(url: str, storage_options: Mapping[str, Any] | None = None):
    """``(filesystem, path)`` for an fsspec URL; fsspec caches filesystem instances per
    process, so this is cheap after the first call in a process."""
    try:
        import fsspec.core
    except ImportError as exc:  # pragma: no cover - fsspec is a dependency
        raise ImportError(f"reading {url!r} needs fsspec: pip install fsspec") from exc
    try:
        return fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except ImportError as exc:  # e.g. s3:// without s3fs installed
        raise ImportError(f"cannot open {url!r} through fsspec: {exc}") from exc
    except ValueError as exc:  # e.g. an unknown protocol
        raise ValueError(f"cannot open {url!r} through fsspec: {exc}") from exc


def read_bytes(location: str, storage_options: Mapping[str, Any] | None = None, *,
               offset: int = 0, size: int | None = None) -> bytes:
    """Read a file (or ``size`` bytes of it from ``offset``): local paths with ``open``,
    URLs through fsspec. Raises whatever the filesystem raises."""
    if not is_url(location):
        with open(location, "rb") as f:
            if offset:
                f.seek(offset)
            return f.read() if size is None else f.read(size)
    fs, path = url_to_fs(location, storage_options)
    if offset == 0 and size is None:
        return fs.cat_file(path)
    return fs.cat_file(path, start=offset, end=None if size is None else offset + size)


def _check_protocols(locations: Sequence[str], storage_options: Mapping[str, Any] | None) -> None:
    """Fail at construction, not at every sample, on a URL whose protocol fsspec does not
    know or whose backend (s3fs, gcsfs, ...) is not installed."""
    seen = set()
    for loc in locations:
        if is_url(loc):
            proto = loc.split("://", 1)[0]
            if proto not in seen:
                seen.add(proto)
                url_to_fs(loc, storage_options)


def _read_error(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{type(exc).__name__}: {exc.strerror}"
    return f"{type(exc).__name__}: {exc}"


def _read_file(ref: SampleRef, storage_options: Mapping[str, Any] | None = None) -> bytes:
    try:
        return read_bytes(ref.location, storage_options)
    except Exception as exc:  # any filesystem's error (OSError, a cloud client's): name the sample
        raise SampleError(ref.index, ref.location, "read", _read_error(exc)) from None


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
            raise ValueError("FileList: labels must be integers (class indices)")
        self._labels = labels.astype(np.int64)
        _check_protocols(self.paths, self.storage_options)

    def __len__(self) -> int:
        return len(self.paths)

    def ref(self, index: int) -> SampleRef:
        i = self._check_index(index)
        return SampleRef(i, self.paths[i], int(self._labels[i]))

    def read(self, ref: SampleRef) -> tuple[bytes, int]:
        return _read_file(ref, self.storage_options), ref.label


class ImageFolder(FileList):
    """``root/<class>/<file>`` trees, as torchvision's ImageFolder: classes sorted by name,
    files sorted within each class, label = class position.

    ``root`` may be an fsspec URL (``memory://photos``, ``s3://bucket/train``): the tree is
    listed once through fsspec, in the same order as a local tree, and every sample's
    location is ``root`` + ``/<class>/.../<file>``.
    """

    def __init__(self, root: str | os.PathLike, extensions: Sequence[str] = IMG_EXTENSIONS, *,
                 storage_options: Mapping[str, Any] | None = None):
        exts = tuple(e.lower() for e in extensions)
        if isinstance(root, str) and is_url(root):
            self.root = root
            self.classes, paths, labels = _list_url_tree(root, exts, storage_options)
            self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
            super().__init__(paths, labels, storage_options=storage_options)
            return
        root_path = Path(root)
        if not root_path.is_dir():
            raise FileNotFoundError(f"ImageFolder: root {str(root_path)!r} is not a directory")
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


def _list_url_tree(root: str, exts: tuple[str, ...], storage_options) -> tuple[list[str], list[str], list[int]]:
    """List an ImageFolder tree behind an fsspec URL: (classes, sample URLs, labels), in the
    order a local tree gets (classes by name; per class, by directory then file name)."""
    fs, base = url_to_fs(root, storage_options)
    base = base.rstrip("/")
    if not fs.isdir(base):
        raise FileNotFoundError(f"ImageFolder: root {root!r} is not a directory")
    classes = sorted(posixpath.basename(e["name"].rstrip("/")) for e in fs.ls(base, detail=True)
                     if e.get("type") == "directory")
    if not classes:
        raise FileNotFoundError(f"ImageFolder: no class folders under {root!r}; expected root/<class>/<image files>")
    prefix = root.rstrip("/")
    paths, labels = [], []
    for label, c in enumerate(classes):
        rel = []
        for p in fs.find(f"{base}/{c}"):
            if not posixpath.basename(p).lower().endswith(exts):
                continue
            rel.append(p[len(base) + 1:] if p.startswith(base + "/") else f"{c}/{posixpath.basename(p)}")
        rel.sort(key=lambda r: (posixpath.dirname(r), posixpath.basename(r)))
        paths += [f"{prefix}/{r}" for r in rel]
        labels += [label] * len(rel)
    if not paths:
        raise FileNotFoundError(f"ImageFolder: no image files ({', '.join(exts)}) under {root!r}")
    return classes, paths, labels


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


# Defined in its own module (it shares this module's base classes and URL helpers).
from .tarshards import TarShards, expand_urls  # noqa: E402  (after the names it imports)
