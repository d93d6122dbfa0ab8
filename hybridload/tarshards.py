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
"""

from __future__ import annotations

import hashlib
import json
import logging
import numbers
import os
import re
import stat
import tarfile
import tempfile
import threading
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .errors import SampleError
from .sources import SampleRef, Source, _read_error, is_url, read_bytes, url_to_fs

log = logging.getLogger(__name__)

INDEX_VERSION = 1
IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")

# --------------------------------------------------------------------------- brace expansion

_NUM_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?$")
_CHAR_RANGE = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.(-?\d+))?$")


def braceexpand(pattern: str) -> list[str]:
    """Expand shell-style braces, as WebDataset shard specs use them.

    ``{a,b}`` alternatives, ``{000..099}`` numeric ranges (zero-padded to the wider bound
    when either bound has a leading zero), ``{1..9..2}`` steps, ``{a..e}`` letter ranges,
    nesting, and ``\\{`` for a literal brace. A group with neither a comma nor a range
    (``{x}``) is kept literally, as in bash. An unmatched ``{`` is an error.

    >>> braceexpand("s-{00..02}.tar")
    ['s-00.tar', 's-01.tar', 's-02.tar']
    """
    return [_unescape(s) for s in _expand(pattern)]


def _unescape(s: str) -> str:
    return re.sub(r"\\([{},\\])", r"\1", s)


def _matching_brace(s: str, start: int) -> int:
    depth, i = 0, start
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError(f"unbalanced '{{' at position {start} in {s!r}")


def _split_top_level(s: str) -> list[str]:
    parts, depth, cur, i = [], 0, [], 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            cur.append(s[i:i + 2])
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _range_items(inner: str) -> list[str] | None:
    m = _NUM_RANGE.match(inner)
    if m:
        a, b, step = m.group(1), m.group(2), m.group(3)
        lo, hi = int(a), int(b)
        width = max(len(a.lstrip("-")), len(b.lstrip("-"))) if _padded(a) or _padded(b) else 0
        return [f"{v:0{width}d}" if width else str(v) for v in _steps(lo, hi, step, inner)]
    m = _CHAR_RANGE.match(inner)
    if m:
        return [chr(v) for v in _steps(ord(m.group(1)), ord(m.group(2)), m.group(3), inner)]
    return None


def _padded(bound: str) -> bool:
    digits = bound.lstrip("-")
    return len(digits) > 1 and digits.startswith("0")


def _steps(lo: int, hi: int, step: str | None, inner: str) -> range:
    k = abs(int(step)) if step is not None else 1
    if k == 0:
        raise ValueError(f"brace range {{{inner}}} has a step of 0")
    return range(lo, hi + 1, k) if lo <= hi else range(lo, hi - 1, -k)


def _expand(s: str) -> list[str]:
    i = 0
    while i < len(s):
        if s[i] == "\\":
            i += 2
            continue
        if s[i] == "{":
            break
        i += 1
    else:
        return [s]
    j = _matching_brace(s, i)
    head, inner, tail = s[:i], s[i + 1:j], s[j + 1:]
    parts = _split_top_level(inner)
    if len(parts) > 1:
        alternatives = [x for p in parts for x in _expand(p)]
    else:
        items = _range_items(inner)
        alternatives = items if items is not None else ["{" + x + "}" for x in _expand(inner)]
    tails = _expand(tail)
    return [head + a + t for a in alternatives for t in tails]


def expand_urls(urls: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """Shard URLs from a brace pattern or a list of them (each entry expanded)."""
    if isinstance(urls, (str, os.PathLike)):
        urls = [urls]
    out: list[str] = []
    for u in urls:
        if not isinstance(u, (str, os.PathLike)):
            raise TypeError(f"TarShards: shard URLs must be strings, got {type(u).__name__}")
        out += braceexpand(os.fspath(u))
    return out


# --------------------------------------------------------------------------- member index

_KEY_EXT = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")  # WebDataset's base_plus_ext
_COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
_cache_lock = threading.Lock()
_memory_cache: dict[tuple, list] = {}


def split_member_name(name: str) -> tuple[str, str] | None:
    """``(key, extension)`` of a member name as WebDataset groups it (extension
    lower-cased), or None for a name without one (skipped)."""
    m = _KEY_EXT.match(name)
    return (m.group(1), m.group(2).lower()) if m else None


def clear_index_cache() -> None:
    """Forget the in-memory member indexes of this process (JSON files stay)."""
    with _cache_lock:
        _memory_cache.clear()


def _fingerprint(url: str, storage_options: Mapping[str, Any]) -> tuple[int, str]:
    """(size, modification stamp) of a shard; FileNotFoundError names the shard."""
    try:
        if not is_url(url):
            st = os.stat(url)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(f"TarShards: shard {url!r} is a directory, not a tar file")
            return st.st_size, str(st.st_mtime_ns)
        fs, path = url_to_fs(url, storage_options)
        info = fs.info(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"TarShards: shard {url!r} does not exist") from None
    except IsADirectoryError:
        raise
    except OSError as exc:
        raise OSError(f"TarShards: cannot stat shard {url!r}: {_read_error(exc)}") from exc
    if info.get("type") == "directory":
        raise FileNotFoundError(f"TarShards: shard {url!r} is a directory, not a tar file")
    stamp = next((info[k] for k in ("mtime", "LastModified", "last_modified", "updated", "mtime_ns", "created",
                                    "ETag", "etag", "md5Hash") if info.get(k) is not None), "")
    return int(info.get("size") or 0), str(stamp)


def _scan(url: str, storage_options: Mapping[str, Any]) -> list:
    """Scan a shard with tarfile: ``[[key, [[ext, offset, size], ...], cls_text|None], ...]``
    in tar order (a key's members grouped at its first appearance)."""
    if is_url(url):
        fs, path = url_to_fs(url, storage_options)
        handle = fs.open(path, "rb")
    else:
        handle = open(url, "rb")
    samples: dict[str, list] = {}
    with handle as f:
        magic = f.read(6)
        for sig, kind in _COMPRESSED.items():
            if magic.startswith(sig):
                raise ValueError(f"TarShards: shard {url!r} is {kind}-compressed; random access needs "
                                 "uncompressed .tar shards (decompress it, or re-shard without compression)")
        f.seek(0)
        try:
            tf = tarfile.open(fileobj=f, mode="r:")
        except tarfile.TarError as exc:
            raise ValueError(f"TarShards: shard {url!r} is not a readable tar file ({exc})") from None
        with tf:
            try:
                for info in tf:
                    if not info.isfile():
                        continue
                    parts = split_member_name(info.name)
                    if parts is None:
                        continue
                    key, ext = parts
                    entry = samples.setdefault(key, [key, [], None])
                    if any(m[0] == ext for m in entry[1]):
                        raise ValueError(f"TarShards: shard {url!r}, key {key!r}: duplicate member "
                                         f"{info.name!r} (a key may have one member per extension)")
                    entry[1].append([ext, info.offset_data, info.size])
                    if ext == "cls":
                        raw = tf.extractfile(info).read(256)
                        entry[2] = raw.decode("utf-8", errors="replace")
            except tarfile.TarError as exc:
                raise ValueError(f"TarShards: shard {url!r} is damaged ({exc})") from None
    return list(samples.values())


def _cache_file(cache_dir: str, url: str, size: int, stamp: str) -> str:
    digest = hashlib.sha1(f"{url}\0{size}\0{stamp}".encode()).hexdigest()[:20]
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", url.rstrip("/").rsplit("/", 1)[-1])[:60]
    return os.path.join(cache_dir, f"{stem}-{digest}.index.json")


def _load_json(path: str, url: str, size: int, stamp: str) -> list | None:
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("TarShards: ignoring unreadable index cache %s (%s); rebuilding it", path, exc)
        return None
    if doc.get("version") != INDEX_VERSION or doc.get("url") != url or doc.get("size") != size \
            or doc.get("stamp") != stamp or not isinstance(doc.get("samples"), list):
        return None
    return doc["samples"]


def _save_json(path: str, url: str, size: int, stamp: str, samples: list) -> None:
    doc = {"version": INDEX_VERSION, "url": url, "size": size, "stamp": stamp, "samples": samples}
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
        os.replace(tmp, path)  # atomic: concurrent ranks never see half a file
    except OSError as exc:
        log.warning("TarShards: could not write the index cache %s (%s); continuing without it", path, exc)


def shard_index(url: str, storage_options: Mapping[str, Any] | None = None, cache_dir: str | None = None) -> list:
    """The member index of one shard: from this process's memory, else from ``cache_dir``,
    else built by one tarfile scan (then kept in both)."""
    so = dict(storage_options or {})
    size, stamp = _fingerprint(url, so)
    mem_key = (url, json.dumps(so, sort_keys=True, default=str), size, stamp)
    with _cache_lock:
        hit = _memory_cache.get(mem_key)
    if hit is not None:
        return hit
    path = _cache_file(os.fspath(cache_dir), url, size, stamp) if cache_dir is not None else None
    samples = _load_json(path, url, size, stamp) if path else None
    if samples is None:
        samples = _scan(url, so)
        if path:
            _save_json(path, url, size, stamp, samples)
    with _cache_lock:
        _memory_cache[mem_key] = samples
    return samples


# --------------------------------------------------------------------------- the source

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

    A sample's location (in refs and errors) is ``"<shard>#<member name>"``.

    Raises:
        ValueError: no shards; a key without an image member; a bad ``.cls``; a
            compressed or damaged shard; no samples at all. Each names the shard and key.
        FileNotFoundError: a shard that does not exist, named.
    """

    def __init__(self, urls: str | os.PathLike | Sequence[str | os.PathLike], label: Callable[[str], int] | None = None,
                 image_exts: Sequence[str] = IMAGE_EXTS, cache_dir: str | os.PathLike | None = None, *,
                 storage_options: Mapping[str, Any] | None = None):
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
                ext, offset, size = self._image_member(url, key, members)
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

    def _image_member(self, url: str, key: str, members: list) -> tuple[str, int, int]:
        for ext, offset, size in members:
            if ext in self.image_exts or ext.rsplit(".", 1)[-1] in self.image_exts:
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
        i = self._check_index(ref.index)
        url, offset, size = self.urls[self._shard[i]], int(self._offset[i]), int(self._size[i])
        try:
            data = read_bytes(url, self.storage_options, offset=offset, size=size)
        except Exception as exc:  # any filesystem's error: name the sample
            raise SampleError(ref.index, ref.location, "read", _read_error(exc)) from None
        if len(data) != size:
            raise SampleError(ref.index, ref.location, "read",
                              f"got {len(data)} of {size} bytes at offset {offset}: the shard is shorter than "
                              "when its index was built (changed or truncated?)")
        return data, ref.label
