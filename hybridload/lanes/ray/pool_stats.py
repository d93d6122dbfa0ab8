"""An elastic actor pool's counters for ``stats()``: thread-safe, reported as a plain dict."""

from __future__ import annotations

import threading
import time
from collections import deque


class PoolStats:
    """An elastic actor pool's counters: actors started (at first, as replacements, to grow),
    lost, stopped on purpose (drained or surplus), failed to start, and the live count over
    time as a short list of ``(seconds since the pool began, live actors)`` samples, one per
    change (the last ``max_samples`` kept)."""

    def __init__(self, max_samples: int = 256):
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._samples: deque[tuple[float, int]] = deque(maxlen=max_samples)
        self.started = self.replaced = self.grown = self.lost = self.stopped = self.failed_starts = 0
        self.target = 0
        self._unreplaced = 0

    def actor_started(self, initial: bool) -> None:
        """One actor started; after the first start a start replaces a lost actor while any is
        unreplaced, else it grows the pool."""
        with self._lock:
            self.started += 1
            if initial:
                return
            if self._unreplaced:
                self._unreplaced -= 1
                self.replaced += 1
            else:
                self.grown += 1

    def actor_lost(self) -> None:
        with self._lock:
            self.lost += 1
            self._unreplaced += 1

    def actor_stopped(self) -> None:
        with self._lock:
            self.stopped += 1

    def start_failed(self) -> None:
        with self._lock:
            self.failed_starts += 1

    def live(self, n: int, target: int | None = None) -> None:
        """Record the live count (and the target) now, if it changed."""
        with self._lock:
            if target is not None:
                self.target = target
            if not self._samples or self._samples[-1][1] != n:
                self._samples.append((round(time.monotonic() - self._t0, 3), n))

    def as_dict(self) -> dict:
        with self._lock:
            return {"started": self.started, "replaced": self.replaced, "grown": self.grown, "lost": self.lost,
                    "stopped": self.stopped, "failed_starts": self.failed_starts, "target": self.target,
                    "live": self._samples[-1][1] if self._samples else 0, "live_over_time": list(self._samples)}
