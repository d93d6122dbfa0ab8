"""Which shard a name means, whatever its spelling (``sub/./s0.tar``, a symlink, a ``file://``
URL), so no shard is listed twice and served twice an epoch; a URL keeps its object's spelling,
a hard link is a shard of its own; and the local globs a list may hold (docs/guide/sources.md)."""

from __future__ import annotations

import functools
import glob
import os
from typing import Sequence

from hybridload.sources._base import is_url

#: fsspec's caching layers: ``simplecache::s3://b/s0.tar`` reads the object ``s3://b/s0.tar``
_CACHES = ("simplecache", "filecache", "blockcache", "cached")
_LOCAL = ("file", "local")


@functools.lru_cache(maxsize=64)
def _protocol_key(protocol: str) -> str:
    """One name for the protocols fsspec serves with one filesystem class (``s3``, ``s3a``)."""
    try:
        import fsspec

        cls = fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError):  # an unknown protocol or a backend not installed: named when it is read
        return protocol.lower()
    return f"{cls.__module__}.{cls.__qualname__}"


def _uncached(url: str) -> str:
    """``url`` without its caching prefixes (``simplecache::s3://b/s0.tar`` is ``s3://b/s0.tar``)."""
    parts = url.split("::")
    while len(parts) > 1 and parts[0].split("://", 1)[0] in _CACHES:
        parts.pop(0)
    return "::".join(parts)


def local_path(url: str) -> str | None:
    """The local path ``url`` names (a plain path, ``file://``, ``local://``, behind any caching
    prefix), or None for another filesystem's URL."""
    rest = _uncached(url)
    if not is_url(rest):
        return rest
    protocol, _, path = rest.partition("://")
    return path if "::" not in rest and protocol.lower() in _LOCAL else None


def shard_key(url: str, links: bool = False) -> str:
    """What every spelling of the shard ``url`` shares (see the module's docstring); ``links``:
    resolve the symlinks of a local path too."""
    if not links and url[:1] == "/" and "//" not in url and "/." not in url:
        return url  # the form a manifest mostly holds (10^6 of them): normal already, no call
    protocol, sep, rest = url.partition("://")
    if sep and "::" not in url and protocol.lower() not in _LOCAL and is_url(url):
        return f"{_protocol_key(protocol)}{sep}{rest}"
    path = local_path(url)
    if path is not None:
        if links:
            return os.path.realpath(path)
        return os.path.normpath(os.path.abspath(path))
    protocol, sep, rest = _uncached(url).partition("://")
    return f"{_protocol_key(protocol)}{sep}{rest}"


def repeated_shard(urls: Sequence[str], links: bool = False) -> tuple[int, int] | None:
    """``(i, j)``: entry ``j`` names the shard entry ``i`` named before it (by `shard_key`), the
    first such ``j``; None where every shard is named once. Without ``links``, a list whose
    entries are all their own keys (normal absolute paths, or URLs of one protocol: what a
    manifest of 10^6 shards holds) is checked as a set, without a key per entry."""
    if not links and len(set(urls)) == len(urls) and _plain(urls):
        return None
    seen: dict[str, int] = {}
    for j, url in enumerate(urls):
        i = seen.setdefault(shard_key(url, links), j)
        if i != j:
            return i, j
    return None


def _plain(urls: Sequence[str]) -> bool:
    """Whether every entry is its own `shard_key` up to one protocol's spelling: two entries
    name one shard only where they are equal."""
    if not urls:
        return True
    if urls[0][:1] == "/":
        return not any(u[:1] != "/" or "//" in u or "/." in u for u in urls)
    prefix = urls[0].partition("://")[0] + "://"
    if prefix == "://" or prefix[:-3].lower() in _LOCAL or "::" in prefix:
        return False
    return all(u.startswith(prefix) and "::" not in u for u in urls)


def expand_glob(url: str) -> list[str]:
    """``url`` as a list: a local path holding ``*``, ``?`` or ``[`` that names no file is a
    glob, expanded (sorted); FileNotFoundError where it matches nothing. Any other ``url``
    is itself."""
    if is_url(url) or not glob.has_magic(url) or os.path.lexists(url):
        return [url]
    found = sorted(glob.glob(url))
    if not found:
        raise FileNotFoundError(
            f"TarShards: the shard pattern {url!r} matches no file (a glob; a brace pattern such as "
            "'shard-{000000..000099}.tar' names the shards by number)"
        )
    return found
