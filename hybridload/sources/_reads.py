"""A batch's reads in flight at once on a process-wide I/O pool, so per-request storage latency
overlaps, their outcomes yielded in input order (the caller decodes sample 0 while the rest are
still read); a `SampleError` comes back as the sample's outcome, anything else is raised there."""

from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Generator, Iterable, Iterator, Protocol, Sequence

from hybridload.errors import SampleError

#: reads in flight per batch for URL locations when a source is not told otherwise: enough
#: to keep 2 cores decoding at ~1,000 images/s with 20 ms per request (1,600 reads/s).
DEFAULT_IO_THREADS = 32
#: threads of the process-wide pool, shared by every lane thread of the process (created as
#: needed; a thread waiting on a request costs memory, not a core).
POOL_THREADS = max(64, 16 * (os.cpu_count() or 1))

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None


def _reset_after_fork() -> None:
    """In a forked child (a process-lane worker): a fresh lock (a parent thread may have held
    this one at the fork) and no pool (its threads did not survive the fork)."""
    global _lock, _pool
    _lock, _pool = threading.Lock(), None


os.register_at_fork(after_in_child=_reset_after_fork)

Outcome = Any  # (payload, label) | SampleError


class Reads(Protocol):
    """Outcomes in order; ``close()`` stops the reads not yet started."""

    def __iter__(self) -> Iterator[Outcome]: ...

    def __next__(self) -> Outcome: ...

    def close(self) -> None: ...


_END = object()


def io_pool() -> ThreadPoolExecutor:
    """This process's I/O thread pool (a new one after a fork: threads do not survive it)."""
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="hybridload-io"))
        return _pool[1]


def check_io_threads(io_threads: int | None, where: str) -> int | None:
    """``io_threads`` as given (None or an int >= 1), else a ValueError saying what to write."""
    if io_threads is None:
        return None
    if isinstance(io_threads, bool) or not isinstance(io_threads, int) or io_threads < 1:
        raise ValueError(
            f"{where}: io_threads must be None (automatic) or an int >= 1, got {io_threads!r}; "
            "write e.g. io_threads=32 (1 reads one sample after another)"
        )
    return io_threads


def sequential_reads(read: Callable[[Any], Any], items: Iterable) -> Generator[Outcome, None, None]:
    """One read after another, each when the caller asks for it (the caller's thread)."""
    for item in items:
        try:
            yield read(item)
        except SampleError as exc:
            yield exc


def _outcome(fut: Future) -> Outcome:
    exc = fut.exception()
    if exc is None:
        return fut.result()
    if isinstance(exc, SampleError):
        return exc
    raise exc


class OrderedReads:
    """``read(item)`` for every item, ``width`` at a time on the I/O pool, outcomes in order.

    The first ``width`` reads start when it is made (a lane can start a batch's reads when it
    accepts the batch, before a thread is free to decode it); ``close()`` cancels the reads
    not yet started."""

    def __init__(self, read: Callable[[Any], Any], items: Sequence, width: int):
        self._read, self._pool, self._it = read, io_pool(), iter(items)
        self._pending: deque = deque()
        for item in self._it:
            self._pending.append(self._pool.submit(read, item))
            if len(self._pending) >= width:
                break

    def __iter__(self) -> "OrderedReads":
        return self

    def __next__(self) -> Outcome:
        if not self._pending:
            raise StopIteration
        try:
            out = _outcome(self._pending.popleft())  # waits for the oldest
        except BaseException:
            self.close()
            raise
        nxt = next(self._it, _END)
        if nxt is not _END:  # ``width`` in flight again while the caller uses ``out``
            self._pending.append(self._pool.submit(self._read, nxt))
        return out

    def close(self) -> None:
        for fut in self._pending:
            fut.cancel()
        self._pending.clear()
        self._it = iter(())

    def __del__(self):
        self.close()


def ordered_reads(read: Callable[[Any], Any], items: Sequence, width: int) -> Iterator[Outcome]:
    """`OrderedReads` (started now), or one read after another, in the caller's thread,
    when ``width`` is 1."""
    if width <= 1 or len(items) <= 1:
        return sequential_reads(read, items)
    return OrderedReads(read, items, width)


def read_many(source: Any, refs: Sequence) -> Reads:
    """A source's reads of ``refs`` in order: its ``read_many`` where it has one (concurrent
    for remote locations, started at once), else one ``read`` after another. ``close()``
    stops the reads not yet started."""
    many = getattr(source, "read_many", None)
    return many(refs) if many is not None else sequential_reads(source.read, refs)
