"""An elastic actor pool's counters for ``stats()``: thread-safe, reported as a plain dict."""

from __future__ import annotations

import threading
import time
from collections import deque


class PoolStats:
    """An elastic pool's counters: actors started, replaced, grown, lost, stopped, failed to start;
    the live count over time (the last ``max_samples`` changes); the node events the keeper saw; and
    the seconds the open pool had no ready actor."""

    def __init__(self, max_samples: int = 256):
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._samples: deque[tuple[float, int]] = deque(maxlen=max_samples)
        self.started = self.replaced = self.grown = self.lost = self.stopped = self.failed_starts = 0
        self.target = 0
        self._unreplaced = 0
        self._events: deque[dict] = deque(maxlen=max_samples)
        self._opened = False
        self._empty_since: float | None = None
        self._empty_s = 0.0

    def actor_started(self, initial: bool) -> None:
        """One actor started; after the first start a start replaces a lost actor or a failed
        start while any is unreplaced, else it grows the pool."""
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
            self._unreplaced += 1  # its retry replaces it: it does not grow the pool

    def node_event(self, event: str, node_id: str = "", address: str = "") -> None:
        """Record ``event`` ("joined", "left", "draining", "no actor", "actors again") with the
        time (seconds since the pool began, and UTC) and the node it concerns."""
        with self._lock:
            self._events.append(
                {
                    "t": round(time.monotonic() - self._t0, 3),
                    "utc": utc_clock(),
                    "event": event,
                    "node": node_id[:8],
                    "address": address,
                }
            )

    def opened(self) -> None:
        """The pool is open: from now on, time with no ready actor counts as ``without_actors_s``."""
        with self._lock:
            self._opened = True
            if self._samples and self._samples[-1][1] == 0:
                self._empty_since = time.monotonic()

    def live(self, n: int, target: int | None = None) -> None:
        """Record the live count (and the target) now, if it changed."""
        with self._lock:
            if target is not None:
                self.target = target
            now = time.monotonic()
            if self._opened and n == 0 and self._empty_since is None:
                self._empty_since = now
            elif n > 0 and self._empty_since is not None:
                self._empty_s += now - self._empty_since
                self._empty_since = None
            if not self._samples or self._samples[-1][1] != n:
                self._samples.append((round(time.monotonic() - self._t0, 3), n))

    def as_dict(self) -> dict:
        with self._lock:
            empty_s = self._empty_s + (time.monotonic() - self._empty_since if self._empty_since is not None else 0.0)
            return {
                "started": self.started,
                "replaced": self.replaced,
                "grown": self.grown,
                "lost": self.lost,
                "stopped": self.stopped,
                "failed_starts": self.failed_starts,
                "target": self.target,
                "live": self._samples[-1][1] if self._samples else 0,
                "live_over_time": list(self._samples),
                "without_actors_s": round(empty_s, 3),
                "node_events": list(self._events),
            }


def utc_clock() -> str:
    """The time of day now, UTC, as ``HH:MM:SS UTC`` (for messages and node events)."""
    return time.strftime("%H:%M:%S UTC", time.gmtime())
