"""The sidecar member index next to a shard (``<shard>.members.json``), and the checks that
keep a stale or malformed one from being used.

``hybridload index`` writes, next to each shard, its member index (see `tar_index`)
with what identifies the shard it was built from: its size, its modification stamp and
``end``, where the tar's last member ends. A sidecar is used only while all three still
hold (the block at ``end`` must be the end-of-archive zeros: a member appended to a shard of
the same size and stamp is seen); anything else is a *stale sidecar*, ignored with a warning
and the shard scanned. Tar pads to 10 KiB records, so a shard rewritten with one sample more
or other labels often keeps its size: the size alone is no key. A sidecar (or ``cache_dir``
file) whose member table is malformed — offsets before the first header or past the shard's
end, sizes that are not ints — is ignored the same way, so a bad one never reaches a read.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Mapping

from hybridload.sources._base import is_url, read_bytes, read_error, url_to_fs
from hybridload.sources.tar.atomic_write import write_atomic

log = logging.getLogger("hybridload.sources.tar.tar_index")

#: what ``hybridload index`` appends to a shard's URL for its sidecar member index
SIDECAR_SUFFIX = ".members.json"
SIDECAR_VERSION = 2
#: a tar header (and a tar block)
BLOCK = 512


def sidecar_url(url: str) -> str:
    """Where the sidecar member index of shard ``url`` lives: next to it."""
    return url + SIDECAR_SUFFIX


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def samples_problem(samples: Any, size: int) -> str:
    """Why ``samples`` is not a member index of a shard of ``size`` bytes (``""``: it is one):
    ``[[key, [[ext, offset, size], ...], cls_text|None], ...]``, every member inside the shard."""
    if not isinstance(samples, list):
        return f'"samples" is a {type(samples).__name__}, not a list'
    for j, entry in enumerate(samples):
        if not (
            isinstance(entry, list)
            and len(entry) == 3
            and isinstance(entry[0], str)
            and entry[0]
            and isinstance(entry[1], list)
            and (entry[2] is None or isinstance(entry[2], str))
        ):
            return f"samples[{j}] is {str(entry)[:60]}, not [key, [[ext, offset, size], ...], cls text or null]"
        for m in entry[1]:
            if not (
                isinstance(m, list) and len(m) == 3 and isinstance(m[0], str) and _is_count(m[1]) and _is_count(m[2])
            ):
                return f"samples[{j}] ({entry[0]!r}) has the member {str(m)[:60]}, not [ext, offset, size]"
            if m[1] < BLOCK or m[2] < 0 or m[1] + m[2] > size:
                return (
                    f"samples[{j}] ({entry[0]!r}) has a member at offset {m[1]} of {m[2]} bytes, outside the "
                    f"shard's {size} bytes"
                )
    return ""


def _tail_is_end(url: str, end: Any, size: int, storage_options: Mapping[str, Any]) -> bool:
    """Whether the block at ``end`` is the tar's end-of-archive zeros (or the shard ends there)."""
    if not _is_count(end) or not BLOCK <= end <= size:
        return False
    tail = read_bytes(url, storage_options, offset=end, size=BLOCK) if end < size else b""
    return not tail.strip(b"\0")


def read_sidecar(url: str, size: int, stamp: str, storage_options: Mapping[str, Any]) -> list | None:
    """The member index in the sidecar next to shard ``url`` (of ``size`` bytes and modification
    stamp ``stamp``), or None where there is none, it cannot be read, it is malformed, or it is
    stale (written for another shard): then it is ignored, with a warning, and the shard scanned."""
    where = sidecar_url(url)
    try:
        doc = json.loads(read_bytes(where, storage_options))
    except FileNotFoundError:
        return None
    except Exception as exc:  # any filesystem's error, or bad JSON: scan instead
        log.warning(
            "TarShards: ignoring the unreadable sidecar index %s (%s); scanning the shard", where, read_error(exc)
        )
        return None
    if not isinstance(doc, dict) or doc.get("hybridload_members") not in (1, SIDECAR_VERSION):
        log.warning("TarShards: ignoring %s: not a sidecar index of version %d", where, SIDECAR_VERSION)
        return None
    rerun = "the shard changed since it was written; run `hybridload index` again"
    if doc.get("size") != size:
        log.warning(
            "TarShards: ignoring the stale sidecar index %s: written for a shard of %s bytes, the shard has "
            "%d (%s); scanning the shard",
            where,
            doc.get("size"),
            size,
            rerun,
        )
        return None
    if "stamp" not in doc:
        log.warning(
            "TarShards: ignoring the sidecar index %s: an older hybridload wrote it without the shard's "
            "modification stamp (run `hybridload index` again); scanning the shard",
            where,
        )
        return None
    if doc.get("stamp") != stamp:
        log.warning(
            "TarShards: ignoring the stale sidecar index %s: written for the shard as modified at %s, the "
            "shard is now modified at %s (%s); scanning the shard",
            where,
            doc.get("stamp"),
            stamp,
            rerun,
        )
        return None
    try:
        tail_ok = _tail_is_end(url, doc.get("end"), size, storage_options)
    except Exception as exc:  # any filesystem's error: the scan that follows reports it by name
        log.warning(
            "TarShards: cannot check the sidecar index %s against its shard (%s); scanning the shard",
            where,
            read_error(exc),
        )
        return None
    if not tail_ok:
        log.warning(
            "TarShards: ignoring the stale sidecar index %s: the shard has members past the end it records "
            "(end=%s; %s); scanning the shard",
            where,
            doc.get("end"),
            rerun,
        )
        return None
    problem = samples_problem(doc.get("samples"), size)
    if problem:
        log.warning("TarShards: ignoring the malformed sidecar index %s (%s); scanning the shard", where, problem)
        return None
    return doc["samples"]


def write_sidecar(
    url: str, ident: Mapping[str, Any], samples: list, storage_options: Mapping[str, Any] | None = None
) -> None:
    """Write shard ``url``'s member index next to it (atomically for local shards); ``ident``
    is the shard's ``{"size", "stamp", "end"}`` as `index_shard` found them."""
    doc = json.dumps(
        {
            "hybridload_members": SIDECAR_VERSION,
            "size": ident["size"],
            "stamp": ident["stamp"],
            "end": ident["end"],
            "samples": samples,
        },
        separators=(",", ":"),
    ).encode()
    where = sidecar_url(url)
    if is_url(where):
        fs, path = url_to_fs(where, storage_options)
        fs.pipe_file(path, doc)
        return
    write_atomic(where, doc)
