"""ImageFolder: ``root/<class>/<file>`` trees, local or behind an fsspec URL."""

from __future__ import annotations

import logging
import os
import posixpath
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from hybridload.sources._base import is_url, url_to_fs
from hybridload.sources._filelist import FileList, names_digest
from hybridload.sources._read_retry import ReadRetry

log = logging.getLogger(__name__)

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class ImageFolder(FileList):
    """``root/<class>/<file>`` trees, as torchvision's ImageFolder: classes sorted by name,
    files sorted within each class, label = class position.

    As torchvision, a class folder with no image file is refused (FileNotFoundError naming
    it); symlinked folders are followed, but never into a folder already visited (a loop).

    ``root`` may be an fsspec URL (``memory://photos``, ``s3://bucket/train``): the tree is
    listed once through fsspec, in the same order as a local tree, and every sample's
    location is ``root`` + ``/<class>/.../<file>``.

    Args:
        root: the tree's root: a local path or an fsspec URL.
        extensions: file extensions that count as images (torchvision's list by default).
        storage_options: fsspec options for a URL root (see `FileList`).
        io_threads: reads in flight at once while a worker reads a batch (see `FileList`).
        read_retry: how a read the storage fails is retried (see `FileList`).
    """

    def __init__(
        self,
        root: str | os.PathLike,
        extensions: Sequence[str] = IMG_EXTENSIONS,
        *,
        storage_options: Mapping[str, Any] | None = None,
        io_threads: int | None = None,
        read_retry: ReadRetry | None = None,
    ):
        exts = tuple(e.lower() for e in extensions)
        if isinstance(root, str) and is_url(root):
            self.root = root
            self.classes, paths, labels = _list_url_tree(root, exts, storage_options)
            self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
            super().__init__(
                paths, labels, storage_options=storage_options, io_threads=io_threads, read_retry=read_retry
            )
            cut = len(root.rstrip("/")) + 1
            self._fingerprint = _folder_fingerprint(self.classes, len(paths), (p[cut:] for p in paths))
            return
        root_path = Path(root)
        if not root_path.is_dir():
            raise FileNotFoundError(f"ImageFolder: root {str(root_path)!r} is not a directory")
        self.root = str(root_path)
        self.classes = sorted(e.name for e in os.scandir(root_path) if e.is_dir())
        if not self.classes:
            raise FileNotFoundError(
                f"ImageFolder: no class folders under {self.root!r}; expected root/<class>/<image files>"
            )
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        paths, labels, empty = [], [], []
        for c in self.classes:
            found = _walk_class(root_path / c, exts)
            if not found:
                empty.append(c)
            paths += found
            labels += [self.class_to_idx[c]] * len(found)
        if not paths:
            raise FileNotFoundError(f"ImageFolder: no image files ({', '.join(exts)}) under {self.root!r}")
        if empty:
            raise FileNotFoundError(
                f"ImageFolder: Found no valid file for the classes {', '.join(empty)} under "
                f"{self.root!r} (empty or unreadable; no image files {', '.join(exts)}); "
                "remove those folders or add their images"
            )
        super().__init__(paths, labels, io_threads=io_threads, read_retry=read_retry)
        tops = [len(str(root_path / c)) for c in self.classes]  # each class's files start with its folder
        rel = (self.classes[k] + p[tops[k] :] for p, k in zip(paths, labels))
        self._fingerprint = _folder_fingerprint(self.classes, len(paths), rel)


def _folder_fingerprint(classes: list[str], files: int, relative: Iterable[str]) -> str:
    """What a saved state records of a tree (`Source.fingerprint`): its classes, its file
    count and a digest of its files' paths below the root, in listing order (a tree moved
    elsewhere keeps it; a renamed, added or removed file or class changes it)."""
    shown = ", ".join(classes[:3]) + (f", ... sha1 {names_digest(classes)}" if len(classes) > 3 else "")
    return (
        f"ImageFolder; classes: {len(classes)} ({shown}); files: {files}; relative paths: sha1 {names_digest(relative)}"
    )


def _walk_class(top: Path, exts: tuple[str, ...]) -> list[str]:
    """Image files under one class folder, sorted by directory then name; symlinked
    directories are followed once: a directory already visited by its real path, or one
    that holds the class folder (a link back to an ancestor such as the root, which would
    relabel other classes' images), is not entered; an unreadable directory raises."""
    seen: set[str] = set()
    top_real = os.path.realpath(top)
    found: list[str] = []

    def fail(exc: OSError) -> None:
        raise PermissionError(
            f"ImageFolder: cannot list {exc.filename!r} ({exc.strerror}); make it readable or remove it"
        ) from None

    for dirpath, dirs, files in os.walk(top, followlinks=True, onerror=fail):
        real = os.path.realpath(dirpath)
        loop = real != top_real and os.path.commonpath([real, top_real]) == real
        if real in seen or loop:  # a symlink loop, or a second link to the same folder
            log.warning("ImageFolder: not following %s (it leads back to %s, already listed)", dirpath, real)
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        found += [os.path.join(dirpath, n) for n in sorted(files) if n.lower().endswith(exts)]
    return sorted(found, key=lambda p: (os.path.dirname(p), os.path.basename(p)))


def _list_url_tree(root: str, exts: tuple[str, ...], storage_options) -> tuple[list[str], list[str], list[int]]:
    """List an ImageFolder tree behind an fsspec URL: (classes, sample URLs, labels), in the
    order a local tree gets (classes by name; per class, by directory then file name)."""
    fs, base = url_to_fs(root, storage_options)
    base = base.rstrip("/")
    if not fs.isdir(base):
        raise FileNotFoundError(f"ImageFolder: root {root!r} is not a directory")
    classes = sorted(
        posixpath.basename(e["name"].rstrip("/")) for e in fs.ls(base, detail=True) if e.get("type") == "directory"
    )
    if not classes:
        raise FileNotFoundError(f"ImageFolder: no class folders under {root!r}; expected root/<class>/<image files>")
    prefix = root.rstrip("/")
    paths, labels = [], []
    for label, c in enumerate(classes):
        rel = []
        for p in fs.find(f"{base}/{c}"):
            if not posixpath.basename(p).lower().endswith(exts):
                continue
            rel.append(p[len(base) + 1 :] if p.startswith(base + "/") else f"{c}/{posixpath.basename(p)}")
        rel.sort(key=lambda r: (posixpath.dirname(r), posixpath.basename(r)))
        paths += [f"{prefix}/{r}" for r in rel]
        labels += [label] * len(rel)
    if not paths:
        raise FileNotFoundError(f"ImageFolder: no image files ({', '.join(exts)}) under {root!r}")
    return classes, paths, labels
