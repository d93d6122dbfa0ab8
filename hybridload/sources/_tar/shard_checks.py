"""Each read checked against the tar header in front of the sample's bytes (about 1 % more read),
so a shard rewritten, truncated or gone since it was indexed stops the pass with a
`ShardIndexError` rather than giving another member's bytes or skipping an outage as bad data."""

from __future__ import annotations

from hybridload.errors import SampleError, ShardIndexError

from hybridload.sources._base import SampleRef, read_error, read_failure
from hybridload.sources._read_retry import DATA_ERRORS

#: bytes read in front of a sample's data: its tar header
HEADER = 512
_RERUN = (
    "rebuild the member indexes (`hybridload index PATTERN -o manifest.json`, or delete the stale "
    "<shard>.members.json) after changing shards"
)


def _header_size(field: bytes) -> int | None:
    """A tar header's size field: octal digits, or GNU's base-256 (first byte 0x80)."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    try:
        return int(field.strip(b"\0 ") or b"0", 8)
    except ValueError:
        return None


def header_problem(header: bytes, name: str, size: int) -> str:
    """Why ``header`` is not the tar header of member ``name`` (as the index spells it: the
    extension lower-cased) of ``size`` bytes; ``""`` when it is. Reads the name (with a ustar
    prefix) and size fields only: a few microseconds, where ``tarfile``'s parser takes ~60.
    A name over 100 bytes or not ASCII may live in a pax or GNU header before this one (this
    one then holds a stand-in: cut short, or ``?`` for each other character), so only its
    size is checked."""
    have = header[:100].split(b"\0", 1)[0]
    if header[257:262] == b"ustar" and header[262:263] == b"\0" and header[345:346] != b"\0":
        have = header[345:500].split(b"\0", 1)[0] + b"/" + have
    want = name.encode("utf-8", "surrogateescape").lower()
    got = _header_size(header[124:136])
    extended = len(want) > 100 or not want.isascii()
    if got == size and (extended or have.lower() == want):
        return ""
    shown = have.decode("utf-8", "replace") if have else "no member"
    return f"the tar header in front of its bytes names {shown!r} of {got} bytes, not {name!r} of {size}"


def checked_member(ref: SampleRef, where: str, data: bytes, offset: int, size: int) -> bytes:
    """The sample's bytes out of ``data`` (its header and its bytes, read from ``offset -
    HEADER``), after checking both against the index: `ShardIndexError` otherwise."""
    if len(data) != size + HEADER:
        got = max(0, len(data) - HEADER)
        reason = (
            f"got {got} of {size} bytes at offset {offset}: the shard is shorter than when this process "
            "indexed it (truncated or rewritten)"
        )
    else:
        reason = header_problem(data[:HEADER], ref.location.rsplit("#", 1)[-1], size)
        if reason:
            reason += ": the shard changed since its member index was built (a stale sidecar or index cache)"
    if reason:
        raise ShardIndexError(where, f"sample {ref.index} ({ref.location}): {reason}; {_RERUN}")
    return data[HEADER:]


def shard_read_failure(ref: SampleRef, where: str, exc: BaseException) -> SampleError | ShardIndexError:
    """A failed read of a shard this process already indexed: missing or unreadable now (it was
    readable then) is a `ShardIndexError` — a shard deleted, moved or made unreadable
    mid-epoch, or storage gone, not one bad sample; anything else as `read_failure` says."""
    if isinstance(exc, DATA_ERRORS):
        return ShardIndexError(
            where,
            f"sample {ref.index} ({ref.location}): {read_error(exc)}; the shard was "
            "readable when this process indexed it and is gone or unreadable now (deleted, "
            "moved, permissions changed, or its storage unmounted): restore it, or "
            f"{_RERUN}",
        )
    return read_failure(ref, exc)
