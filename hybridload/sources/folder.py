"""ImageFolder: ``root/<class>/<file>`` trees, local or behind an fsspec URL."""

from __future__ import annotations

import os
import posixpath
from pathlib import Path
from typing import Any, Mapping, Sequence

from ._base import is_url, url_to_fs
from .filelist import FileList

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


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
