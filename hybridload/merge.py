"""The ordered merger: releases results strictly in sequence order, exactly once.

A reorder buffer keyed by sequence number. Producers ``put`` results (or exceptions) as
lanes finish them; the consumer ``get``s them in order. ``admits(seq)`` tells the
scheduler whether a task may be started: only sequences inside the window ahead of the
consumer are, which bounds memory in flight by the window, not by the dataset.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from .errors import BatchTimeoutError


class OrderedMerger:
    """Reorder buffer for sequences ``start .. end-1``.

    Args:
        start: first sequence number to release.
        end: one past the last.
        window: how many sequences ahead of the consumer may be in flight or buffered.
        timeout_s: how long ``get`` waits for the next sequence before raising
            :class:`BatchTimeoutError`.
        describe: optional ``seq -> str`` used in the timeout message (e.g. which lane).
    """

    def __init__(self, start: int, end: int, window: int, timeout_s: float,
                 describe: Callable[[int], str] | None = None):
        if window <= 0:
            raise ValueError(f"window must be positive, got {window}")
        self.next = start
        self.end = end
        self.window = window
        self.timeout_s = timeout_s
        self.describe = describe
        self.duplicates = 0
        self._buf: dict[int, tuple[bool, Any]] = {}
        self._cond = threading.Condition()
        self._closed = False

    def admits(self, seq: int) -> bool:
        """True when ``seq`` lies inside the window ahead of the consumer."""
        return self.next <= seq < min(self.end, self.next + self.window)

    def put(self, seq: int, value: Any, *, error: bool = False) -> bool:
        """Offer a result. Returns False (and drops it) for a duplicate or a stale sequence."""
        with self._cond:
            if self._closed or seq < self.next or seq >= self.end or seq in self._buf:
                self.duplicates += 1
                return False
            self._buf[seq] = (error, value)
            if seq == self.next:
                self._cond.notify_all()
            return True

    def settled(self, seq: int) -> bool:
        """True once ``seq`` has a result (buffered or already released)."""
        with self._cond:
            return seq < self.next or seq in self._buf

    def buffered(self) -> int:
        with self._cond:
            return len(self._buf)

    def get(self, poll: Callable[[], None] | None = None, poll_s: float = 0.05) -> Any:
        """The next result in order; raises the stored exception for a failed sequence,
        StopIteration at the end, BatchTimeoutError if it never arrives.

        ``poll`` runs every ``poll_s`` while waiting (the scheduler uses it to notice
        failed lanes and start more work).
        """
        with self._cond:
            if self.next >= self.end:
                raise StopIteration
            deadline = time.monotonic() + self.timeout_s
            while self.next not in self._buf:
                if self._closed:
                    raise RuntimeError("the merger was closed")
                left = deadline - time.monotonic()
                if left <= 0:
                    detail = self.describe(self.next) if self.describe else ""
                    raise BatchTimeoutError(self.next, self.timeout_s, detail)
                if poll is not None:
                    self._cond.release()
                    try:
                        poll()
                    finally:
                        self._cond.acquire()
                    if self.next in self._buf:
                        break
                self._cond.wait(min(left, poll_s) if poll is not None else left)
            error, value = self._buf.pop(self.next)
            self.next += 1
        if error:
            raise value
        return value

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._buf.clear()
            self._cond.notify_all()
