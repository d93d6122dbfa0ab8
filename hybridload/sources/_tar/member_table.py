"""The checks a stored member table (sidecar or ``cache_dir`` file) passes at first touch without
reading the shard (each member once, in tar order, on tar blocks, inside the archive's end), and
its digest, which catches an edit that keeps the offsets (a label changed in place)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

#: a tar header (and a tar block)
BLOCK = 512
#: past any shard's size: an offset or size beyond it is outside, whatever it is (numpy holds int64)
BIG = 2**62


def _shape_problem(samples: list) -> str:
    """Why ``samples`` is not shaped as a member index (``""``: it is)."""
    for j, entry in enumerate(samples):
        if not (
            type(entry) is list
            and len(entry) == 3
            and type(entry[0]) is str
            and entry[0]
            and type(entry[1]) is list
            and entry[1]
            and (entry[2] is None or type(entry[2]) is str)
        ):
            return f"samples[{j}] is {str(entry)[:60]}, not [key, [[ext, offset, size], ...], cls text or null]"
        for m in entry[1]:
            if not (type(m) is list and len(m) == 3 and type(m[0]) is str and type(m[1]) is int and type(m[2]) is int):
                return f"samples[{j}] ({entry[0]!r}) has the member {str(m)[:60]}, not [ext, offset, size]"
    return ""


def table_problem(samples: Any, size: int, end: int | None = None) -> str:
    """Why ``samples`` is not a member index of a shard of ``size`` bytes whose members end by
    ``end`` (default: the shard's end); ``""`` where it is one: well-formed, every member inside
    and on a tar block, samples in tar order (each key's first member after the previous
    key's), a key's members in tar order, no member overlapping another or its header, no key
    twice. One pass over the members, the arithmetic in numpy (a first touch's cost)."""
    if not isinstance(samples, list):
        return f'"samples" is a {type(samples).__name__}, not a list'
    problem = _shape_problem(samples)
    if problem or not samples:
        return problem
    limit = size if end is None else min(size, end)
    counts = np.fromiter((len(e[1]) for e in samples), np.int64, len(samples))
    owner = np.repeat(np.arange(len(samples)), counts)  # each member's sample
    flat = [m for e in samples for m in e[1]]
    offsets = np.fromiter((m[1] if -BIG < m[1] < BIG else BIG for m in flat), np.int64, len(flat))
    sizes = np.fromiter((m[2] if -BIG < m[2] < BIG else BIG for m in flat), np.int64, len(flat))

    def at(bad: np.ndarray) -> int:
        return int(np.flatnonzero(bad)[0])

    def named(j: int) -> str:
        return f"samples[{j}] ({samples[j][0]!r})"

    outside = (offsets < BLOCK) | (sizes < 0) | (offsets > limit) | (sizes > limit) | (offsets + sizes > limit)
    if outside.any():
        k = at(outside)
        return (
            f"{named(int(owner[k]))} has a member at offset {flat[k][1]} of {flat[k][2]} bytes, outside the "
            f"shard's members (bytes {BLOCK} to {limit})"
        )
    if (offsets % BLOCK).any():
        k = at(offsets % BLOCK != 0)
        return f"{named(int(owner[k]))} has a member at offset {flat[k][1]}, not on a {BLOCK}-byte tar block"
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    firsts = offsets[starts]
    if (np.diff(firsts) <= 0).any():
        j = at(np.diff(firsts) <= 0) + 1
        return f"{named(j)} does not follow samples[{j - 1}] in tar order: a member listed twice or out of order"
    inside = (np.diff(offsets) <= 0) & (np.diff(owner) == 0)
    if inside.any():
        return f"{named(int(owner[at(inside) + 1]))} lists its members out of tar order"
    keys: dict[str, int] = {}
    for j, entry in enumerate(samples):
        if keys.setdefault(entry[0], j) != j:
            return f"samples[{j}] repeats the key {entry[0]!r} of samples[{keys[entry[0]]}]"
    order = np.argsort(offsets, kind="stable")
    o, n = offsets[order], sizes[order]
    overlap = o[1:] < o[:-1] + n[:-1] + BLOCK  # each member's data is preceded by its own header block
    if overlap.any():
        k = at(overlap)
        i, j = int(owner[order[k]]), int(owner[order[k + 1]])
        return (
            f"{named(j)} has a member at offset {int(o[k + 1])}, inside a member of {named(i)} or its header: "
            "a member listed twice"
        )
    return ""


def table_digest(size: int, stamp: str, end: int | None, table: bytes) -> str:
    """The digest of a member table as stored (its JSON bytes) and of the shard it describes."""
    return hashlib.sha256(f"{size}\0{stamp}\0{end}\0".encode() + table).hexdigest()[:32]


def table_document(fields: dict, samples: list) -> bytes:
    """A sidecar or ``cache_dir`` file: ``fields`` (``size``, ``stamp``, ``end`` where known), the
    ``digest`` of the table and the table itself, last, so that a reader digests its bytes as
    they are stored (`digest_holds`) instead of writing them again."""
    table = json.dumps(samples, separators=(",", ":")).encode()
    head = dict(fields, digest=table_digest(fields["size"], fields["stamp"], fields.get("end"), table))
    return json.dumps(head, separators=(",", ":")).encode()[:-1] + b',"samples":' + table + b"}"


def digest_holds(doc: dict, raw: bytes) -> bool:
    """Whether the table stored in ``raw`` (parsed: ``doc``) matches the digest written with it;
    any rewrite of the file, even one that keeps its meaning, is taken as an edit."""
    cut = raw.rfind(b'"samples":')
    table = raw[cut + len(b'"samples":') : raw.rstrip().rfind(b"}")] if cut >= 0 else b""
    return doc.get("digest") == table_digest(doc["size"], doc["stamp"], doc.get("end"), table)
