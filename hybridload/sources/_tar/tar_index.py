"""A tar shard's member index (per key, each member's extension, data offset and size; keys as
WebDataset groups members), from its sidecar, else ``cache_dir``, else one scan; held by the
caller (`shard_members`), never here."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import stat
import tarfile
from typing import Any, BinaryIO, Callable, Mapping

from hybridload.sources._base import is_url, read_error, url_to_fs
from hybridload.sources._tar.atomic_write import write_atomic
from hybridload.sources._tar.member_table import digest_holds, table_document, table_problem
from hybridload.sources._tar.sidecar import SIDECAR_SUFFIX, read_sidecar, sidecar_url, write_sidecar

__all__ = [
    "SIDECAR_SUFFIX",
    "index_shard",
    "shard_index",
    "shard_size",
    "sidecar_url",
    "split_member_name",
    "write_sidecar",
]

log = logging.getLogger(__name__)

INDEX_VERSION = 2  # 2: with the digest of its table (an older file is rebuilt)

_KEY_EXT = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")  # WebDataset's base_plus_ext
_COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}


def split_member_name(name: str) -> tuple[str, str] | None:
    """``(key, extension)`` of a member name as WebDataset groups it (extension
    lower-cased), or None for a name without one (skipped)."""
    m = _KEY_EXT.match(name)
    return (m.group(1), m.group(2).lower()) if m else None


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
        hint = (
            " (a glob is expanded for local paths only; name URL shards with a brace pattern such as "
            "'train-{000000..000099}.tar')"
            if is_url(url) and any(c in url for c in "*?[")
            else ""
        )
        raise FileNotFoundError(f"TarShards: shard {url!r} does not exist{hint}") from None
    except IsADirectoryError:
        raise
    except OSError as exc:
        raise OSError(f"TarShards: cannot stat shard {url!r}: {read_error(exc)}") from exc
    if info.get("type") == "directory":
        raise FileNotFoundError(f"TarShards: shard {url!r} is a directory, not a tar file")
    stamp = next(
        (
            info[k]
            for k in (
                "mtime",
                "LastModified",
                "last_modified",
                "updated",
                "mtime_ns",
                "created",
                "ETag",
                "etag",
                "md5Hash",
            )
            if info.get(k) is not None
        ),
        "",
    )
    return int(info.get("size") or 0), str(stamp)


def _scan(url: str, storage_options: Mapping[str, Any], data: bytes | None = None) -> tuple[list, int]:
    """Scan a shard with tarfile: ``([[key, [[ext, offset, size], ...], cls_text|None], ...], end)``
    in tar order (a key's members grouped at its first appearance; ``end``: where the last
    member ends); from ``data`` (the whole shard, already read) when given."""
    handle: BinaryIO
    if data is not None:
        handle = io.BytesIO(data)
    elif is_url(url):
        fs, path = url_to_fs(url, storage_options)
        handle = fs.open(path, "rb")
    else:
        handle = open(url, "rb")
    samples: dict[str, list] = {}
    with handle as f:
        magic = f.read(6)
        for sig, kind in _COMPRESSED.items():
            if magic.startswith(sig):
                raise ValueError(
                    f"TarShards: shard {url!r} is {kind}-compressed; random access needs "
                    "uncompressed .tar shards (decompress it, or re-shard without compression)"
                )
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
                        raise ValueError(
                            f"TarShards: shard {url!r}, key {key!r}: duplicate member "
                            f"{info.name!r} (a key may have one member per extension)"
                        )
                    entry[1].append([ext, info.offset_data, info.size])
                    if ext == "cls":
                        member = tf.extractfile(info)  # None only for a member that is not a file, skipped above
                        entry[2] = None if member is None else member.read(256).decode("utf-8", errors="replace")
            except tarfile.TarError as exc:
                raise ValueError(f"TarShards: shard {url!r} is damaged ({exc})") from None
            end = tf.offset
    return list(samples.values()), end


def _cache_file(cache_dir: str, url: str, size: int, stamp: str) -> str:
    digest = hashlib.sha1(f"{url}\0{size}\0{stamp}".encode()).hexdigest()[:20]
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", url.rstrip("/").rsplit("/", 1)[-1])[:60]
    return os.path.join(cache_dir, f"{stem}-{digest}.index.json")


def _load_json(path: str, url: str, size: int, stamp: str) -> list | None:
    try:
        with open(path, "rb") as f:
            raw = f.read()
        doc = json.loads(raw)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("TarShards: ignoring unreadable index cache %s (%s); rebuilding it", path, exc)
        return None
    if (
        not isinstance(doc, dict)
        or doc.get("version") != INDEX_VERSION
        or doc.get("url") != url
        or doc.get("size") != size
        or doc.get("stamp") != stamp
    ):
        return None
    problem = table_problem(doc.get("samples"), size)
    if not problem and not digest_holds(doc, raw):
        problem = "its member table does not match its digest: edited after it was written"
    if problem:
        log.warning("TarShards: ignoring the malformed index cache %s (%s); rebuilding it", path, problem)
        return None
    return doc["samples"]


def _save_json(path: str, url: str, size: int, stamp: str, samples: list) -> None:
    doc = table_document({"version": INDEX_VERSION, "url": url, "size": size, "stamp": stamp}, samples)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, doc)  # concurrent ranks never see half a file
    except OSError as exc:
        log.warning("TarShards: could not write the index cache %s (%s); continuing without it", path, exc)


def shard_index(
    url: str,
    storage_options: Mapping[str, Any] | None = None,
    cache_dir: str | None = None,
    *,
    sidecar: bool = True,
    fetch: Callable[[], bytes] | None = None,
) -> list:
    """The member index of one shard: ``[[key, [[ext, offset, size], ...], cls_text|None], ...]``
    in tar order, from its sidecar (``sidecar=True``), else from ``cache_dir``, else built by
    one tarfile scan (then written to ``cache_dir``) — of the bytes ``fetch()`` returns when
    given (a shard read whole anyway), else of the shard itself. FileNotFoundError names a
    missing shard."""
    so = dict(storage_options or {})
    size, stamp = _fingerprint(url, so)
    samples = read_sidecar(url, size, stamp, so) if sidecar else None
    if samples is not None:
        return samples
    path = _cache_file(os.fspath(cache_dir), url, size, stamp) if cache_dir is not None else None
    samples = _load_json(path, url, size, stamp) if path else None
    if samples is None:
        samples, _ = _scan(url, so, fetch() if fetch is not None else None)
        if path:
            _save_json(path, url, size, stamp, samples)
    return samples


def index_shard(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[list, dict]:
    """One scan of a shard for its sidecar: ``(member index, {"size", "stamp", "end"})``, the
    shard's identity taken before the scan (a shard that changes meanwhile leaves a stale
    sidecar, which is ignored). FileNotFoundError names a missing shard."""
    so = dict(storage_options or {})
    size, stamp = _fingerprint(url, so)
    samples, end = _scan(url, so)
    return samples, {"size": size, "stamp": stamp, "end": end}


def shard_size(url: str, storage_options: Mapping[str, Any] | None = None) -> int:
    """The shard's size in bytes (FileNotFoundError names a missing shard)."""
    return _fingerprint(url, dict(storage_options or {}))[0]
