"""The scheduler hands batch tasks to lanes, pull-based, within the merger's window.

Each lane holds at most ``lane.slots`` tasks; a task is started only while the merger
admits its sequence number (inside the window ahead of the consumer). A sample error
is delivered in order as an error; any other failure of a task is retried on a lane,
up to ``max_retries`` times, before it is delivered as an error.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Sequence

import numpy as np

from .errors import SampleError
from .lanes.base import BatchTask, Lane
from .merge import OrderedMerger
from .stats import LoaderStats

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, lanes: Sequence[Lane], batches: Sequence[np.ndarray], start: int, epoch: int,
                 merger: OrderedMerger, stats: LoaderStats, max_retries: int = 2):
        if not lanes:
            raise ValueError("Scheduler needs at least one lane")
        self.lanes = list(lanes)
        self.batches = batches
        self.epoch = epoch
        self.merger = merger
        self.stats = stats
        self.max_retries = max_retries
        self._next = start
        self._retry: list[BatchTask] = []
        self._attempts: dict[int, int] = {}
        self._in_flight: dict[str, set[int]] = {lane.name: set() for lane in self.lanes}
        self._owner: dict[int, str] = {}
        self._lock = threading.Lock()
        self._stopped = False

    def where(self, seq: int) -> str:
        """Which lane holds ``seq`` (for timeout messages)."""
        with self._lock:
            lane = self._owner.get(seq)
        return f"held by lane '{lane}'" if lane else "not started"

    def _free_lane(self) -> Lane | None:
        best = None
        for lane in self.lanes:
            free = lane.slots - len(self._in_flight[lane.name])
            if free > 0 and (best is None or free > best[0]):
                best = (free, lane)
        return best[1] if best else None

    def pump(self) -> None:
        """Start every task that the window and the lanes' slots allow."""
        while True:
            with self._lock:
                if self._stopped:
                    return
                if self._retry:
                    task = self._retry[0]
                elif self._next < len(self.batches) and self.merger.admits(self._next):
                    task = None
                else:
                    return
                lane = self._free_lane()
                if lane is None:
                    return
                if task is None:
                    task = BatchTask(self._next, self.epoch, self.batches[self._next])
                    self._next += 1
                else:
                    self._retry.pop(0)
                self._in_flight[lane.name].add(task.seq)
                self._owner[task.seq] = lane.name
            try:
                lane.submit(task, self._done(lane, time.perf_counter()))
            except Exception as exc:  # the lane refused: count it as a failed attempt
                self._done(lane, time.perf_counter())(task, exc)

    def _done(self, lane: Lane, t_start: float):
        def done(task: BatchTask, result) -> None:
            with self._lock:
                self._in_flight[lane.name].discard(task.seq)
                self._owner.pop(task.seq, None)
                if self._stopped:
                    return
            if isinstance(result, BaseException):
                self._failed(lane, task, result)
            else:
                n = len(task.indices) if hasattr(task.indices, "__len__") else 1
                self.stats.record_batch(lane.name, n, time.perf_counter() - t_start,
                                        skipped=getattr(result, "skipped", ()))
                self.merger.put(task.seq, result)
            self.pump()
        return done

    def _failed(self, lane: Lane, task: BatchTask, exc: BaseException) -> None:
        if isinstance(exc, SampleError):
            self.merger.put(task.seq, exc, error=True)
            return
        with self._lock:
            n = self._attempts.get(task.seq, 0) + 1
            self._attempts[task.seq] = n
            retry = n <= self.max_retries
            if retry:
                self._retry.append(task)
        if retry:
            self.stats.record_retry(lane.name)
            log.warning("batch %d failed on lane '%s' (%s: %s); retrying (attempt %d of %d)",
                        task.seq, lane.name, type(exc).__name__, exc, n + 1, self.max_retries + 1)
        else:
            self.merger.put(task.seq, exc, error=True)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
