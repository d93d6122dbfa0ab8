"""Shell-style brace expansion of shard URL patterns, through the ``braceexpand`` library.

WebDataset expands its shard specs with the same library, so a pattern means the same
shards here as there (a local glob, which WebDataset refuses, is expanded too).
"""

from __future__ import annotations

import os
from typing import Sequence

import braceexpand as _braceexpand_lib

from hybridload.sources._tar.shard_names import expand_glob, repeated_shard


def braceexpand(pattern: str) -> list[str]:
    """Expand shell-style braces, as WebDataset shard specs use them.

    A thin wrapper over the ``braceexpand`` library (the one WebDataset uses), returning a
    list: ``{a,b}`` alternatives, ``{000..099}`` numeric ranges (zero-padded to the wider
    bound when a bound has a leading zero), ``{1..9..2}`` steps, ``{a..e}`` letter ranges,
    nesting, and ``\\{``/``\\}`` for literal braces. A group with neither a comma nor a range
    (``{x}``) is kept literally, as in bash.

    Args:
        pattern: the pattern to expand.

    Returns:
        The expanded strings, in the library's (bash's) order.

    Raises:
        ValueError: the pattern has an unbalanced brace.

    >>> braceexpand("s-{00..02}.tar")
    ['s-00.tar', 's-01.tar', 's-02.tar']
    """
    try:
        return list(_braceexpand_lib.braceexpand(pattern))
    except _braceexpand_lib.UnbalancedBracesError:  # type: ignore[attr-defined]  # its .pyi omits the class
        raise ValueError(
            f"unbalanced braces in the shard pattern {pattern!r}: close each '{{' with '}}', "
            f"or write a literal brace as '\\{{' / '\\}}'"
        ) from None


def expand_urls(urls: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """Shard URLs from a brace pattern or a list of them (each entry expanded), each shard once.

    Args:
        urls: a pattern, a path, or a list of them; a local path with ``*``, ``?`` or ``[``
            that names no file is a glob, expanded in sorted order (`shard_names`).

    Returns:
        The expanded URLs, entry by entry in the order given.

    Raises:
        TypeError: an entry is not a string or path.
        ValueError: an entry has an unbalanced brace, or a shard is named twice, under one
            spelling or two (``{a,a}``, ``sub/s0.tar`` and ``sub/./s0.tar``, a symlink and its
            target, a path and its ``file://`` URL): its samples would come twice every epoch.
        FileNotFoundError: a glob that matches no file.
    """
    if isinstance(urls, (str, os.PathLike)):
        urls = [urls]
    out: list[str] = []
    for u in urls:
        if not isinstance(u, (str, os.PathLike)):
            raise TypeError(f"TarShards: shard URLs must be strings, got {type(u).__name__}")
        out += [g for b in braceexpand(os.fspath(u)) for g in expand_glob(b)]
    repeat = repeated_shard(out, links=True)
    if repeat is not None:
        i, j = repeat
        named = (
            f"the shard {out[i]!r} is named twice"
            if out[i] == out[j]
            else f"{out[i]!r} and {out[j]!r} name the same shard"
        )
        raise ValueError(
            f"TarShards: {named} (entries {i} and {j} of {str(urls)[:200]}); its samples would come "
            "twice every epoch: name each shard once"
        )
    return out
