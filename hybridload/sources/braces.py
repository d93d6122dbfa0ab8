"""Shell-style brace expansion of shard URL patterns, as WebDataset writes them."""

from __future__ import annotations

import os
import re
from typing import Sequence

_NUM_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?$")
_CHAR_RANGE = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.(-?\d+))?$")


def braceexpand(pattern: str) -> list[str]:
    """Expand shell-style braces, as WebDataset shard specs use them.

    ``{a,b}`` alternatives, ``{000..099}`` numeric ranges (zero-padded to the wider bound
    when either bound has a leading zero), ``{1..9..2}`` steps, ``{a..e}`` letter ranges,
    nesting, and ``\\{`` for a literal brace. A group with neither a comma nor a range
    (``{x}``) is kept literally, as in bash. An unmatched ``{`` is an error.

    Args:
        pattern: the pattern to expand.

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
    """Shard URLs from a brace pattern or a list of them (each entry expanded).

    Args:
        urls: a pattern, a path, or a list of them.
    """
    if isinstance(urls, (str, os.PathLike)):
        urls = [urls]
    out: list[str] = []
    for u in urls:
        if not isinstance(u, (str, os.PathLike)):
            raise TypeError(f"TarShards: shard URLs must be strings, got {type(u).__name__}")
        out += braceexpand(os.fspath(u))
    return out
