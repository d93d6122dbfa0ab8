"""The scheduler hands batch tasks to lanes, pull-based, within the merger's window.

* A task starts only while the merger admits its sequence number (inside the window
  ahead of the consumer), and only on a lane with a free slot.
* Lanes are tried in order. A lane with a ``cap`` takes a task only while its share of
  the tasks handed out stays at or below the cap (the GPU lane in "split" mode). A
  ``fallback`` lane takes tasks only when every other lane is broken, or for retries.
* A :class:`SampleError` is delivered in order as the batch's result. A task that fails
  otherwise is handed to another lane (its failed lanes excluded), up to
  ``max_retries`` times; a lane that fails ``break_after`` tasks in a row is marked
  broken and gets no more. A lost worker (:class:`WorkerLost`) or a batch the lane
  cannot take (:class:`Reroute`) does not count against its lane.
* Stragglers: a task running longer than ``straggler_factor`` times its lane's typical
  task time (and at least ``straggler_min_s``) is issued once more, to another worker;
  the first result wins and the other is dropped by the merger.

Whatever happens, each sequence number is delivered exactly once.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Sequence

import numpy as np

from .errors import Reroute, SampleError, WorkerLost
from .lanes.base import BatchTask, Lane
from .merge import OrderedMerger
from .stats import LoaderStats

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, lanes: Sequence[Lane], batches: Sequence[np.ndarray], start: int, epoch: int,
                 merger: OrderedMerger, stats: LoaderStats, *, caps: dict[str, float] | None = None,
                 fallback: Sequence[str] = (), max_retries: int = 3, break_after: int = 2,
                 straggler_factor: float | None = 4.0, straggler_min_s: float = 2.0):
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
        self.straggler_factor = straggler_factor
        self.straggler_min_s = straggler_min_s
        self.broken: set[str] = set()
        self._next = start
        self._retry: list[BatchTask] = []
        self._excluded: dict[int, set[str]] = {}
        self._attempts: dict[int, int] = {}
        self._fails_in_row = {lane.name: 0 for lane in self.lanes}
        self._assigned = {lane.name: 0 for lane in self.lanes}
        self._busy = {lane.name: 0 for lane in self.lanes}          # copies running per lane
        self._running: dict[int, list[tuple[str, float]]] = {}       # seq -> [(lane, start time)]
        self._typical: dict[str, float] = {}                         # lane -> EWMA of task seconds
        self._reissued: set[int] = set()
        self._lock = threading.Lock()
        self._stopped = False

    # ------------------------------------------------------------------ queries
    def where(self, seq: int) -> str:
        """Which lane holds ``seq`` (for timeout messages)."""
        with self._lock:
            copies = self._running.get(seq, [])
        return f"held by lane '{copies[0][0]}'" if copies else "not started"

    def _usable(self, lane: Lane, excluded: set[str]) -> bool:
        return lane.name not in self.broken and lane.name not in excluded and lane.slots > 0

    def _pick(self, excluded: set[str], retry: bool) -> Lane | None:
        primaries = [ln for ln in self.lanes if ln.name not in self.fallback and self._usable(ln, excluded)]
        candidates = list(primaries)
        if retry or not primaries:
            candidates += [ln for ln in self.lanes if ln.name in self.fallback and self._usable(ln, excluded)]
        total = sum(self._assigned.values())
        for lane in candidates:
            if self._busy[lane.name] >= lane.slots:
                continue
            cap = self.caps.get(lane.name)
            if cap is not None and not retry and self._assigned[lane.name] + 1 > cap * (total + 1) + 1e-9:
                continue
            return lane
        return None

    def _no_lane_left(self, excluded: set[str]) -> bool:
        return not any(self._usable(ln, excluded) for ln in self.lanes)

    def _delivered(self, seq: int) -> bool:
        return self.merger.settled(seq)

    # ------------------------------------------------------------------ starting work
    def _start(self, lane: Lane, task: BatchTask) -> tuple[Lane, BatchTask, float]:
        t0 = time.perf_counter()
        self._busy[lane.name] += 1
        self._running.setdefault(task.seq, []).append((lane.name, t0))
        return lane, task, t0

    def _stragglers(self) -> list[tuple[Lane, BatchTask, float]]:
        """Re-issue (once) tasks running far longer than their lane's typical task."""
        if self.straggler_factor is None:
            return []
        now = time.perf_counter()
        out = []
        for seq, copies in list(self._running.items()):
            if seq in self._reissued or len(copies) != 1 or self._delivered(seq):
                continue
            lane_name, t0 = copies[0]
            typical = self._typical.get(lane_name)
            if typical is None or now - t0 < max(self.straggler_min_s, self.straggler_factor * typical):
                continue
            lane = self._pick(set(), retry=True)
            if lane is None:
                continue
            self._reissued.add(seq)
            self.stats.record_reissue(lane_name)
            log.warning("batch %d has run %.1f s on lane '%s' (typical %.2f s); issuing it again on lane '%s', "
                        "the first result wins", seq, now - t0, lane_name, typical, lane.name)
            out.append(self._start(lane, BatchTask(seq, self.epoch, self.batches[seq])))
        return out

    def pump(self) -> None:
        """Start every task that the window, the caps and the lanes' slots allow."""
        with self._lock:
            if self._stopped:
                return
            starts = self._stragglers()
        for lane, task, t0 in starts:
            self._submit(lane, task, t0)
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
                    self._assigned[lane.name] += 1
                    _, _, t0 = self._start(lane, task)
            if undeliverable is not None:
                self.merger.put(undeliverable.seq, RuntimeError(
                    f"batch {undeliverable.seq}: no lane left to run it (broken: {sorted(self.broken)}, "
                    f"failed on: {sorted(self._excluded.get(undeliverable.seq, ()))})"), error=True)
                continue
            self._submit(lane, task, t0)

    def _submit(self, lane: Lane, task: BatchTask, t0: float) -> None:
        try:
            lane.submit(task, self._done(lane, t0))
        except Exception as exc:  # the lane refused: count it as a failed attempt
            self._done(lane, t0)(task, exc)

    # ------------------------------------------------------------------ results
    def _finished(self, lane: Lane, seq: int, t0: float) -> bool:
        """Book-keeping for one finished copy; True if another copy of ``seq`` still runs."""
        self._busy[lane.name] -= 1
        copies = self._running.get(seq, [])
        if (lane.name, t0) in copies:
            copies.remove((lane.name, t0))
        if not copies:
            self._running.pop(seq, None)
        return bool(copies)

    def _done(self, lane: Lane, t_start: float):
        def done(task: BatchTask, result) -> None:
            with self._lock:
                others_running = self._finished(lane, task.seq, t_start)
                if self._stopped:
                    return
            if isinstance(result, BaseException):
                if others_running or self._delivered(task.seq):
                    log.info("a copy of batch %d failed on lane '%s' (%s); another copy carries it",
                             task.seq, lane.name, type(result).__name__)
                else:
                    self._failed(lane, task, result)
            else:
                seconds = time.perf_counter() - t_start
                with self._lock:
                    self._fails_in_row[lane.name] = 0
                    prev = self._typical.get(lane.name)
                    self._typical[lane.name] = seconds if prev is None else 0.8 * prev + 0.2 * seconds
                n = len(task.indices) if hasattr(task.indices, "__len__") else 1
                if self.merger.put(task.seq, result):
                    self.stats.record_batch(lane.name, n, seconds, skipped=getattr(result, "skipped", ()))
                else:
                    self.stats.record_duplicate(lane.name)
            self.pump()
        return done

    def _failed(self, lane: Lane, task: BatchTask, exc: BaseException) -> None:
        if isinstance(exc, SampleError):
            self.merger.put(task.seq, exc, error=True)
            return
        lane_fault = not isinstance(exc, (Reroute, WorkerLost))
        with self._lock:
            self._assigned[lane.name] -= 1  # shares count delivered work, not failed attempts
            n = self._attempts.get(task.seq, 0) + 1
            self._attempts[task.seq] = n
            if lane_fault:
                self._fails_in_row[lane.name] += 1
                if self._fails_in_row[lane.name] >= self.break_after and lane.name not in self.broken:
                    self.broken.add(lane.name)
                    log.warning("lane '%s' failed %d tasks in a row (last: %s: %s); it gets no more tasks, "
                                "the other lanes carry on", lane.name, self._fails_in_row[lane.name],
                                type(exc).__name__, exc)
            others = [ln for ln in self.lanes if ln.name != lane.name and ln.name not in self.broken]
            if others and not isinstance(exc, WorkerLost):
                self._excluded.setdefault(task.seq, set()).add(lane.name)
            limit = self.max_retries + (len(self.lanes) if isinstance(exc, WorkerLost) else 0)
            retry = n <= limit and not self._no_lane_left(self._excluded.get(task.seq, set()))
            if retry:
                self._retry.append(task)
        if retry:
            self.stats.record_retry(lane.name)
            log.log(logging.INFO if isinstance(exc, Reroute) else logging.WARNING,
                    "batch %d failed on lane '%s' (%s: %s); handing it on (attempt %d)",
                    task.seq, lane.name, type(exc).__name__, exc, n + 1)
        else:
            self.merger.put(task.seq, exc, error=True)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
