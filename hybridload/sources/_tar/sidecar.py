"""The sidecar member index next to a shard (``<shard>.members.json``), used only while the
shard's size, stamp and end still hold and its table passes `member_table`'s checks; anything
else is ignored with a warning and the shard scanned (docs/guide/sources.md)."""

from __future__ import annotations

import json
import logging
from typing import Any, Mapping

from hybridload.sources._base import is_url, read_bytes, read_error, url_to_fs
from hybridload.sources._tar.atomic_write import write_atomic
from hybridload.sources._tar.member_table import BLOCK, digest_holds, table_document, table_problem

log = logging.getLogger("hybridload.sources._tar.tar_index")

#: what ``hybridload index`` appends to a shard's URL for its sidecar member index
SIDECAR_SUFFIX = ".members.json"
SIDECAR_VERSION = 3
#: the versions an older hybridload wrote: without their table's digest (1: without the stamp too)
OLDER_VERSIONS = (1, 2)

_older_seen = False  # an older sidecar met in this process: warned once, not for each shard


def sidecar_url(url: str) -> str:
    """Where the sidecar member index of shard ``url`` lives: next to it."""
    return url + SIDECAR_SUFFIX


def _tail_is_end(url: str, end: Any, size: int, storage_options: Mapping[str, Any]) -> bool:
    """Whether the block at ``end`` is the tar's end-of-archive zeros (or the shard ends there)."""
    if isinstance(end, bool) or not isinstance(end, int) or not BLOCK <= end <= size:
        return False
    tail = read_bytes(url, storage_options, offset=end, size=BLOCK) if end < size else b""
    return not tail.strip(b"\0")


def read_sidecar(url: str, size: int, stamp: str, storage_options: Mapping[str, Any]) -> list | None:
    """The member index in the sidecar next to shard ``url`` (of ``size`` bytes and modification
    stamp ``stamp``), or None where there is none, it cannot be read, it is malformed, or it is
    stale (written for another shard): then it is ignored, with a warning, and the shard scanned."""
    where = sidecar_url(url)
    try:
        raw = read_bytes(where, storage_options)
        doc = json.loads(raw)
    except FileNotFoundError:
        return None
    except Exception as exc:  # any filesystem's error, or bad JSON: scan instead
        log.warning(
            "TarShards: ignoring the unreadable sidecar index %s (%s); scanning the shard", where, read_error(exc)
        )
        return None
    if isinstance(doc, dict) and doc.get("hybridload_members") in OLDER_VERSIONS:
        _older(where)
        return None
    if not isinstance(doc, dict) or doc.get("hybridload_members") != SIDECAR_VERSION:
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
    problem = table_problem(doc.get("samples"), size, doc["end"])
    if problem:
        log.warning("TarShards: ignoring the malformed sidecar index %s (%s); scanning the shard", where, problem)
        return None
    if not digest_holds(doc, raw):
        log.warning(
            "TarShards: ignoring the sidecar index %s: its member table does not match its digest (edited after "
            "`hybridload index` wrote it; run it again); scanning the shard",
            where,
        )
        return None
    return doc["samples"]


def _older(where: str) -> None:
    """Say once per process that sidecars of an older hybridload are scanned past."""
    global _older_seen
    if _older_seen:
        log.debug("TarShards: ignoring %s, a sidecar index of an older hybridload; scanning the shard", where)
        return
    _older_seen = True
    log.warning(
        "TarShards: ignoring %s and every other sidecar index an older hybridload wrote (without the digest of "
        "its member table, which keeps an edited table from being used); scanning those shards: run "
        "`hybridload index` again to rewrite them (this warning is given once)",
        where,
    )


def write_sidecar(
    url: str, ident: Mapping[str, Any], samples: list, storage_options: Mapping[str, Any] | None = None
) -> None:
    """Write shard ``url``'s member index next to it (atomically for local shards); ``ident``
    is the shard's ``{"size", "stamp", "end"}`` as `index_shard` found them."""
    fields = {
        "hybridload_members": SIDECAR_VERSION,
        "size": ident["size"],
        "stamp": ident["stamp"],
        "end": ident["end"],
    }
    doc = table_document(fields, samples)
    where = sidecar_url(url)
    if is_url(where):
        fs, path = url_to_fs(where, storage_options)
        fs.pipe_file(path, doc)
        return
    write_atomic(where, doc)
