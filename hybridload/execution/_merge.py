"""The ordered merger: a reorder buffer that releases results in sequence order, exactly once, and
admits only the window ahead of the consumer, so memory in flight is bounded by the window (where a
pass stands is counted by `PassState`, not by its cursor)."""

from __future__ import annotations

import threading
import time
from typing import Any

from hybridload.errors import BatchTimeoutError


class OrderedMerger:
    """Reorder buffer for sequences ``start .. end-1``, passive: it calls nobody.

    Args:
        start: first sequence number to release.
        end: one past the last.
        window: sequences ahead of the consumer that may be in flight or buffered.
        timeout_s: how long ``get`` waits for the next before `BatchTimeoutError`.
    """

    def __init__(self, start: int, end: int, window: int, timeout_s: float):
        if window <= 0:
            raise ValueError(f"window must be positive, got {window}")
        self.next = start
        self.end = end
        self.window = window
        self.timeout_s = timeout_s
        self.duplicates = 0
        self._buf: dict[int, tuple[bool, Any, int]] = {}  # seq -> (error, value, GPU bytes)
        self._cond = threading.Condition()
        self._closed = False
        self._aborted: BaseException | None = None
        self._device_bytes = 0  # bytes of buffered results whose images live on a GPU
        self.largest_device_batch = 0

    def admits(self, seq: int) -> bool:
        """True when ``seq`` lies inside the window ahead of the consumer."""
        return self.next <= seq < min(self.end, self.next + self.window)

    def end_at(self, end: int) -> None:
        """Open-ended tasks ran out at ``end``: a ``get`` there raises StopIteration."""
        with self._cond:
            self.end = max(self.next, min(self.end, end))
            self._cond.notify_all()

    def put(self, seq: int, value: Any, *, error: bool = False) -> bool:
        """Offer a result. Returns False (and drops it) for a duplicate or a stale sequence."""
        with self._cond:
            if self._closed or seq < self.next or seq >= self.end or seq in self._buf:
                self.duplicates += 1
                return False
            nbytes = 0 if error else device_nbytes(value)
            self._buf[seq] = (error, value, nbytes)
            self._device_bytes += nbytes
            self.largest_device_batch = max(self.largest_device_batch, nbytes)
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

    def device_bytes(self) -> int:
        """Bytes of GPU memory held by finished, buffered results."""
        with self._cond:
            return self._device_bytes

    def get(self) -> Any:
        """The next result in order; its stored exception, StopIteration at the end,
        `BatchTimeoutError` if it never comes."""
        with self._cond:
            if self.next >= self.end:
                raise StopIteration
            deadline = time.monotonic() + self.timeout_s
            while self.next not in self._buf:
                if self.next >= self.end:  # the end became known while we waited
                    raise StopIteration
                if self._aborted is not None:
                    raise self._aborted
                if self._closed:
                    raise RuntimeError("the merger was closed")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BatchTimeoutError(self.next, self.timeout_s)
                self._cond.wait(left)
            error, value, nbytes = self._buf.pop(self.next)
            self._device_bytes -= nbytes
            self.next += 1
        if error:
            raise value
        return value

    def abort(self, exc: BaseException) -> None:
        """The producer side failed for good: a waiting or later ``get`` raises ``exc``."""
        with self._cond:
            self._aborted = exc
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._buf.clear()
            self._device_bytes = 0
            self._cond.notify_all()


def device_nbytes(result: Any) -> int:
    """GPU bytes a result's images hold (0 for host memory or anything without images)."""
    images = getattr(result, "images", None)
    if images is None or not getattr(images, "is_cuda", False):
        return 0
    return int(images.nbytes)
