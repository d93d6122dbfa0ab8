"""Shard manifests in wids' format (``{"wids_version": 1, "shardlist": [{"url", "nsamples"}, ...]}``,
relative URLs against the manifest or its ``base``), read in O(shards) without touching a shard:
docs/guide/sources.md."""

from __future__ import annotations

import json
import os
import posixpath
from typing import Any, Mapping, Sequence, TypeGuard

from hybridload.errors import ManifestError

from hybridload.sources._base import is_url, read_bytes, read_error
from hybridload.sources._tar.atomic_write import write_atomic
from hybridload.sources._tar.shard_names import repeated_shard

WIDS_VERSION = 1
#: the most samples a dataset can hold: its indices are int64
MAX_SAMPLES = 2**63 - 1


def is_manifest(urls: Any) -> TypeGuard[str | os.PathLike]:
    """True when ``urls`` names a manifest: one path or URL ending in ``.json``, no braces."""
    if not isinstance(urls, (str, os.PathLike)):
        return False
    text = os.fspath(urls)
    return text.lower().endswith(".json") and "{" not in text


def _base_of(location: str) -> str:
    """The directory relative URLs in the manifest at ``location`` are resolved against."""
    if is_url(location):
        return location.rsplit("/", 1)[0] if "/" in location.split("://", 1)[-1] else location
    return os.path.dirname(os.path.abspath(location))


def resolve(base: str, url: str) -> str:
    """``url`` as given when absolute (a URL or an absolute path), else joined to ``base``."""
    if is_url(url) or os.path.isabs(url):
        return url
    if is_url(base):
        scheme, rest = base.split("://", 1)
        return f"{scheme}://{posixpath.normpath(posixpath.join(rest, url))}"
    return os.path.normpath(os.path.join(base, url))


def _entry(pairs: list) -> Any:
    """An object of the manifest as it is parsed: a ``{"url", "nsamples"}`` entry as a small
    ``(url, nsamples)`` tuple (10^6 of them stay lean), anything else a dict."""
    if len(pairs) == 2 and pairs[0][0] == "url" and pairs[1][0] == "nsamples":
        return (pairs[0][1], pairs[1][1])
    return dict(pairs)


def _count(manifest: str, i: int, entry: Any) -> tuple[str, int]:
    if isinstance(entry, tuple):
        url, n = entry
    elif isinstance(entry, dict):
        url, n = entry.get("url"), entry.get("nsamples")
    else:
        url = n = None
    if not isinstance(url, str) or not url:
        raise ManifestError(
            f"TarShards: manifest {manifest!r}, shardlist[{i}] is {str(entry)[:80]}: each entry "
            'needs a "url" string (and an "nsamples" count)'
        )
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ManifestError(
            f"TarShards: manifest {manifest!r}, shardlist[{i}] ({url!r}) has nsamples={n!r}; "
            "it must be the shard's sample count, an int >= 0 (write the manifest with "
            "`hybridload index PATTERN -o manifest.json`)"
        )
    return url, n


def read_manifest(
    location: str | os.PathLike, storage_options: Mapping[str, Any] | None = None
) -> tuple[list[str], list[int]]:
    """``(shard URLs, sample counts)`` from the manifest at ``location`` (a path or URL),
    relative URLs resolved; `ManifestError` names a missing, unreadable or malformed one."""
    where = os.fspath(location)
    try:
        raw = read_bytes(where, storage_options)
    except FileNotFoundError:
        raise ManifestError(
            f"TarShards: manifest {where!r} does not exist; write it with `hybridload index PATTERN -o manifest.json`"
        ) from None
    except Exception as exc:  # any filesystem's error
        raise ManifestError(f"TarShards: cannot read manifest {where!r}: {read_error(exc)}") from None
    try:
        doc = json.loads(raw, object_pairs_hook=_entry)
    except ValueError as exc:
        raise ManifestError(f"TarShards: manifest {where!r} is not valid JSON ({exc})") from None
    del raw
    if not isinstance(doc, dict) or not isinstance(doc.get("shardlist"), list):
        raise ManifestError(
            f'TarShards: manifest {where!r} has no "shardlist" list; expected '
            '{"wids_version": 1, "shardlist": [{"url": ..., "nsamples": ...}, ...]}'
        )
    if doc.get("wids_version", WIDS_VERSION) != WIDS_VERSION:
        raise ManifestError(
            f"TarShards: manifest {where!r} has wids_version={doc.get('wids_version')!r}; "
            f"this hybridload reads version {WIDS_VERSION}"
        )
    base = _base_of(where)
    if isinstance(doc.get("base"), str):
        base = resolve(base, doc["base"])
    urls, counts, entries, total = [], [], doc.pop("shardlist"), 0
    for i, entry in enumerate(entries):
        url, n = _count(where, i, entry)
        total += n
        if total > MAX_SAMPLES:
            raise ManifestError(
                f"TarShards: manifest {where!r}, shardlist[{i}] ({url!r}) has nsamples={n}: the "
                f"counts up to it sum to {total}, past the {MAX_SAMPLES} samples (2^63 - 1) a "
                "dataset can index; each nsamples must be its shard's sample count"
            )
        urls.append(resolve(base, url))
        counts.append(n)
        entries[i] = None  # each entry freed as it is taken
    if not urls:
        raise ManifestError(f"TarShards: manifest {where!r} lists no shards")
    _check_unique(where, urls)
    return urls, counts


def _check_unique(where: str, urls: list[str]) -> None:
    """A shard listed twice, under one spelling or two (``sub/s0.tar`` and ``/data/sub//s0.tar``,
    a path and its ``file://`` URL: `shard_names`, without touching the shards) would be read
    twice every epoch: a ManifestError naming both entries."""
    repeat = repeated_shard(urls)
    if repeat is None:
        return
    i, j = repeat
    also = f", as {urls[j]!r}" if urls[j] != urls[i] else ""
    raise ManifestError(
        f"TarShards: manifest {where!r} lists the shard {urls[i]!r} twice (shardlist[{i}] and "
        f"shardlist[{j}]{also}): its samples would come twice every epoch; list each shard once"
    )


def manifest_doc(urls: Sequence[str], counts: Sequence[int], base: str | None = None) -> dict:
    """The manifest of ``urls`` with ``counts``; with ``base`` (the manifest's directory),
    URLs below it are written relative to it, so the dataset can move with its manifest, and
    other local paths absolute (a path relative to the working directory would be resolved
    against the manifest's)."""

    def rel(u: str) -> str:
        if base is None or is_url(u) != is_url(base):
            return u
        if is_url(u):
            return u[len(base) + 1 :] if u.startswith(base.rstrip("/") + "/") else u
        r = os.path.relpath(os.path.abspath(u), base)
        return os.path.abspath(u) if r.startswith("..") else r  # never relative to anything but the manifest

    return {
        "wids_version": WIDS_VERSION,
        "shardlist": [{"url": rel(u), "nsamples": int(n)} for u, n in zip(urls, counts)],
    }


def write_manifest(location: str | os.PathLike, urls: Sequence[str], counts: Sequence[int]) -> None:
    """Write the manifest of ``urls`` and ``counts`` to local ``location`` atomically, URLs
    below its directory relative to it, with the mode ``open()`` gives (`atomic_write`)."""
    where = os.fspath(location)
    base = os.path.dirname(os.path.abspath(where))
    write_atomic(where, json.dumps(manifest_doc(urls, counts, base), separators=(",", ":")).encode())
