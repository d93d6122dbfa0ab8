"""The member index of a tar shard (WebDataset layout), built once and cached.

Each shard is scanned once with :mod:`tarfile` into a member index — per key, the
``(extension, offset of the data, size)`` of its members — cached in memory for the
process and, with ``cache_dir``, as a JSON file keyed by shard URL, size and modification
time. Members are grouped into samples by key: the member name up to the first dot of
its basename (``train/n0144_17.jpg`` → key ``train/n0144_17``, extension ``jpg``), as
WebDataset does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
import tarfile
import tempfile
import threading
from typing import Any, Mapping

from hybridload.sources._base import is_url, read_error, url_to_fs

log = logging.getLogger(__name__)

INDEX_VERSION = 1

_KEY_EXT = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")  # WebDataset's base_plus_ext
_COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
_cache_lock = threading.Lock()
_memory_cache: dict[tuple, list] = {}



def _reset_after_fork() -> None:
    """In a forked child (a process-lane worker): a fresh lock, as a parent thread may have held this one."""
    global _cache_lock
    _cache_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


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
        raise OSError(f"TarShards: cannot stat shard {url!r}: {read_error(exc)}") from exc
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
