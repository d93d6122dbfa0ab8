"""The scheduler hands batch tasks to lanes, pull-based, within the merger's window.

* A task starts only while the merger admits its sequence number (inside the window
  ahead of the consumer), and only on a lane with a free slot.
* Lanes are tried in order. A lane with a ``cap`` takes a task only while its share of
  the tasks handed out stays at or below the cap (the GPU lane in "split" mode). A
  ``fallback`` lane takes tasks only when every other lane is broken, or for retries.
* A :class:`SampleError` is delivered in order as the batch's result. A task that fails
  otherwise is handed to another lane (its failed lanes excluded), up to
  ``max_retries`` times; a lane that fails ``break_after`` tasks in a row is marked
  broken and gets no more. Whatever happens, every task is delivered exactly once.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Sequence

import numpy as np

from .errors import Reroute, SampleError
from .lanes.base import BatchTask, Lane
from .merge import OrderedMerger
from .stats import LoaderStats

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, lanes: Sequence[Lane], batches: Sequence[np.ndarray], start: int, epoch: int,
                 merger: OrderedMerger, stats: LoaderStats, *, caps: dict[str, float] | None = None,
                 fallback: Sequence[str] = (), max_retries: int = 3, break_after: int = 2):
        if not lanes:
            raise ValueError("Scheduler needs at least one lane")
        self.lanes = list(lanes)
        self.batches = batches
        self.epoch = epoch
        self.merger = merger
        self.stats = stats
        self.caps = caps if caps is not None else {}  # shared: the loader may re-plan caps live
        self.fallback = set(fallback)
        self.max_retries = max_retries
        self.break_after = break_after
        self.broken: set[str] = set()
        self._next = start
        self._retry: list[BatchTask] = []
        self._excluded: dict[int, set[str]] = {}
        self._attempts: dict[int, int] = {}
        self._fails_in_row: dict[str, int] = {lane.name: 0 for lane in self.lanes}
        self._assigned: dict[str, int] = {lane.name: 0 for lane in self.lanes}
        self._in_flight: dict[str, set[int]] = {lane.name: set() for lane in self.lanes}
        self._owner: dict[int, str] = {}
        self._lock = threading.Lock()
        self._stopped = False

    def where(self, seq: int) -> str:
        """Which lane holds ``seq`` (for timeout messages)."""
        with self._lock:
            lane = self._owner.get(seq)
        return f"held by lane '{lane}'" if lane else "not started"

    def shares(self) -> dict[str, int]:
        with self._lock:
            return dict(self._assigned)

    def _usable(self, lane: Lane, excluded: set[str]) -> bool:
        return lane.name not in self.broken and lane.name not in excluded and lane.slots > 0

    def _pick(self, excluded: set[str], retry: bool) -> Lane | None:
        primaries = [ln for ln in self.lanes if ln.name not in self.fallback and self._usable(ln, excluded)]
        candidates = list(primaries)
        if retry or not primaries:
            candidates += [ln for ln in self.lanes if ln.name in self.fallback and self._usable(ln, excluded)]
        total = sum(self._assigned.values())
        for lane in candidates:
            if len(self._in_flight[lane.name]) >= lane.slots:
                continue
            cap = self.caps.get(lane.name)
            if cap is not None and not retry and self._assigned[lane.name] + 1 > cap * (total + 1) + 1e-9:
                continue
            return lane
        return None

    def _no_lane_left(self, excluded: set[str]) -> bool:
        return not any(self._usable(ln, excluded) for ln in self.lanes)

    def pump(self) -> None:
        """Start every task that the window, the caps and the lanes' slots allow."""
        while True:
            undeliverable = None
            with self._lock:
                if self._stopped:
                    return
                if self._retry:
                    task, retry = self._retry[0], True
                elif self._next < len(self.batches) and self.merger.admits(self._next):
                    task, retry = None, False
                else:
                    return
                seq = task.seq if task else self._next
                excluded = self._excluded.get(seq, set())
                if self._no_lane_left(excluded):
                    undeliverable = task or BatchTask(seq, self.epoch, self.batches[seq])
                    if task:
                        self._retry.pop(0)
                    else:
                        self._next += 1
                else:
                    lane = self._pick(excluded, retry)
                    if lane is None:
                        return
                    if task is None:
                        task = BatchTask(self._next, self.epoch, self.batches[self._next])
                        self._next += 1
                    else:
                        self._retry.pop(0)
                    self._in_flight[lane.name].add(task.seq)
                    self._owner[task.seq] = lane.name
                    self._assigned[lane.name] += 1
            if undeliverable is not None:
                self.merger.put(undeliverable.seq, RuntimeError(
                    f"batch {undeliverable.seq}: no lane left to run it (broken: {sorted(self.broken)}, "
                    f"failed on: {sorted(self._excluded.get(undeliverable.seq, ()))})"), error=True)
                continue
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
                with self._lock:
                    self._fails_in_row[lane.name] = 0
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
            self._assigned[lane.name] -= 1  # shares count delivered work, not failed attempts
            n = self._attempts.get(task.seq, 0) + 1
            self._attempts[task.seq] = n
            if not isinstance(exc, Reroute):
                self._fails_in_row[lane.name] += 1
                if self._fails_in_row[lane.name] >= self.break_after and lane.name not in self.broken:
                    self.broken.add(lane.name)
                    log.warning("lane '%s' failed %d tasks in a row (last: %s: %s); it gets no more tasks, "
                                "the other lanes carry on", lane.name, self._fails_in_row[lane.name],
                                type(exc).__name__, exc)
            others = [ln for ln in self.lanes if ln.name != lane.name and ln.name not in self.broken]
            if others:
                self._excluded.setdefault(task.seq, set()).add(lane.name)
            retry = n <= self.max_retries and not self._no_lane_left(self._excluded.get(task.seq, set()))
            if retry:
                self._retry.append(task)
        if retry:
            self.stats.record_retry(lane.name)
            log.log(logging.INFO if isinstance(exc, Reroute) else logging.WARNING,
                    "batch %d failed on lane '%s' (%s: %s); handing it to another lane (attempt %d)",
                    task.seq, lane.name, type(exc).__name__, exc, n + 1)
        else:
            self.merger.put(task.seq, exc, error=True)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
