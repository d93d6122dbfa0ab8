"""The dispatcher: one thread that hands tasks to lanes within the merger's window and alone changes
the pass's bookkeeping (lanes report into its inbox), so each sequence number is delivered exactly
once whatever fails (its rules: docs/guide/concepts.md, "How a pass runs")."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Sequence

from hybridload.errors import SampleError, StorageError
from hybridload.lanes._base import BatchTask, Lane, Reroute
from hybridload.lanes._spec import budget_bytes
from hybridload.execution._admission import ShareAdmission
from hybridload.execution._books import LaneBook, cancel_at_lanes
from hybridload.execution._hooks import DispatchHooks
from hybridload.execution._merge import OrderedMerger
from hybridload.execution._pass_config import PassConfig
from hybridload.execution._picking import LanePicker
from hybridload.execution._retry import Action, LaneState, decide, own_failure
from hybridload.execution._stragglers import StragglerWatch, Watched
from hybridload.execution._tasks import TasksEnded

log = logging.getLogger(__name__)


class Dispatcher:
    """Runs one pass: ``tasks[start:]`` (``tasks[k].seq == k``) onto ``lanes``, results into ``merger``."""

    def __init__(
        self,
        lanes: Sequence[Lane],
        tasks: Sequence[BatchTask],
        *,
        start: int,
        merger: OrderedMerger,
        hooks: DispatchHooks,
        config: PassConfig | None = None,
        admission: ShareAdmission | None = None,
        fallback: Sequence[Lane] = (),
    ):
        if not lanes:
            raise ValueError("Dispatcher needs at least one lane")
        self._books = [LaneBook(ln, any(ln is f for f in fallback)) for ln in lanes]
        self._tasks, self._next = tasks, start
        self._merger, self._hooks = merger, hooks
        self._admission = admission if admission is not None else ShareAdmission()  # its caps: written here only
        config = config if config is not None else PassConfig()
        self._rules, self._tick_s = config.rules, config.tick_s
        self._picker = LanePicker(self._books, merger, self._admission, budget_bytes(config.gpu_memory_budget_mb))
        self._retry_queue: deque[BatchTask] = deque()
        self._attempts: dict[int, int] = {}
        self._running: dict[int, list[tuple[LaneBook, float]]] = {}  # seq -> copies (book, start)
        self._held: dict[int, BatchTask] = {}  # seq -> its task, while a copy runs
        self._reissued: set[int] = set()
        self._watch = StragglerWatch(config.stragglers)  # running copies by when to look at them
        self._inbox: deque = deque()  # (book, start, task, result) from lanes
        self._cond = threading.Condition()
        self._lock = threading.Lock()  # the bookkeeping, for where()
        self._stopped = False
        self._poked = True  # a wake not yet acted on (the pass's start is one: its first fill)
        self._thread = threading.Thread(target=self._loop, name="hybridload-dispatch", daemon=True)

    # ------------------------------------------------------------------ control
    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        with self._cond:
            self._poked = True  # kept if the thread is busy now: it looks again before waiting
            self._cond.notify()

    def stop(self, join_timeout_s: float = 10.0) -> None:
        """End the pass: no more starts; tasks still out are cancelled at their lanes (``Lane.cancel``)."""
        with self._cond:
            self._stopped = True
            self._inbox.clear()
            self._cond.notify()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(join_timeout_s)
        with self._lock:
            out = [(book.lane, self._held[seq]) for seq, copies in self._running.items() for book, _t0 in copies]
        cancel_at_lanes(out, "of a given-up pass")

    def where(self, seq: int) -> str:
        """Which lane holds ``seq`` (for timeout messages)."""
        with self._lock:
            copies = list(self._running.get(seq, ()))
        return f"held by lane '{copies[0][0].lane.name}'" if copies else "not started"

    # ------------------------------------------------------------------ the thread
    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    if not self._stopped and not self._inbox and not self._poked:
                        self._cond.wait(self._tick_s)
                    if self._stopped:
                        return
                    self._poked = False
                    reports = list(self._inbox)
                    self._inbox.clear()
                with self._lock:
                    self._settle_all(reports)
                    self._reissue_stragglers()
                    self._fill()
                reports.clear()  # no settled result held while waiting (a lane may reuse its buffer)
        except BaseException as exc:  # a bug here must surface to the consumer, not hang it
            log.exception("the dispatcher failed")
            self._merger.abort(exc)

    def _report_to(self, book: LaneBook, t0: float, task: BatchTask):
        def done(_reported: BatchTask, result) -> None:  # settled as the task handed out
            with self._cond:
                if not self._stopped:
                    self._inbox.append((book, t0, task, result))
                    self._cond.notify()

        return done

    def _start(self, book: LaneBook, task: BatchTask) -> None:
        t0 = time.perf_counter()
        book.in_flight += 1
        self._running.setdefault(task.seq, []).append((book, t0))
        self._held[task.seq] = task
        self._watch.started(Watched(task.seq, book, t0, task))
        done = self._report_to(book, t0, task)
        try:
            book.lane.submit(task, done)
        except Exception as exc:  # the lane refused: a failed attempt
            done(task, exc)

    # ------------------------------------------------------------------ starting work
    def _fill(self) -> None:
        """Start every task that the window, the caps and the lanes' slots allow."""
        while not self._stopped:
            if self._retry_queue:
                task, retry = self._retry_queue[0], True
            elif self._next < len(self._tasks) and self._merger.admits(self._next):
                try:
                    task, retry = self._tasks[self._next], False
                except TasksEnded as ended:  # open-ended tasks: the pass ends here
                    self._merger.end_at(ended.count)
                    continue
                except RuntimeError as exc:  # streamed tasks: the caller's iterator broke its len()
                    self._merger.put(self._next, exc, error=True)
                    self._next += 1
                    continue
            else:
                return
            if self._picker.no_lane_left(task.seq):
                self._take(retry)
                self._deliver_error(task.seq, self._picker.no_lane_error(task.seq))
                continue
            book = self._picker.pick(self._picker.excluded(task.seq), retry)
            if book is None:
                return
            self._take(retry)
            book.handed += 1
            self._start(book, task)

    def _take(self, retry: bool) -> None:
        if retry:
            self._retry_queue.popleft()
        else:
            self._next += 1

    def _reissue_stragglers(self) -> None:
        now = time.perf_counter()
        for copy in self._watch.overdue(now, self._running, self._reissued, self._merger.settled):
            seq, book, t0 = copy.seq, copy.book, copy.t0
            other = self._picker.pick(set(), retry=True, reissue=True)
            if other is None:  # no free slot anywhere: look again at the next wake
                self._watch.again(copy, now)
                return
            self._reissued.add(seq)
            self._hooks.batch_reissued(book.lane.name)
            self._mark("reissue", seq=seq, lane=book.lane.name, to=other.lane.name, ran_s=now - t0)
            log.warning(
                "batch %d has run %.1f s on lane '%s' (typical %.2f s); issuing it again on lane '%s', "
                "the first result wins",
                seq,
                now - t0,
                book.lane.name,
                book.typical_s,
                other.lane.name,
            )
            self._start(other, copy.task)

    # ------------------------------------------------------------------ results
    def _settle_all(self, reports: list) -> None:
        for report in reports:
            self._settle(*report)

    def _settle(self, book: LaneBook, t0: float, task: BatchTask, result) -> None:
        book.in_flight -= 1
        copies = self._running.get(task.seq, [])
        if (book, t0) in copies:
            copies.remove((book, t0))
        if not copies:
            self._running.pop(task.seq, None)
            self._held.pop(task.seq, None)
        if isinstance(result, BaseException):
            settled = self._merger.settled(task.seq)
            outage = isinstance(result, StorageError)  # not the batch's: the other copy's reads may get through
            if settled or (copies and (outage or not own_failure(result))):
                why = "the batch has its result" if settled else "another copy carries it"
                log.info(
                    "a copy of batch %d failed on lane '%s' (%s); %s",
                    task.seq,
                    book.lane.name,
                    type(result).__name__,
                    why,
                )
                return
            self._failed(book, task, result)
            if copies:  # the batch's own failure: the other copies would end the same way, or kill one more worker
                lanes = {id(b.lane): b.lane for b, _t0 in copies}.values()
                cancel_at_lanes([(lane, task) for lane in lanes], "whose other copy failed")
            return
        seconds = (now := time.perf_counter()) - t0
        book.fails_in_row = 0
        book.typical_s = seconds if book.typical_s is None else 0.8 * book.typical_s + 0.2 * seconds
        kept = self._merger.put(task.seq, result)
        if self._hooks.trace is not None:
            self._hooks.trace.batch(task.seq, book.lane.name, t0, now, result, kept, pass_key=self._merger)
        if kept:
            self._hooks.batch_done(book.lane.name, task.size, seconds, getattr(result, "skipped", ()))
            self._admission.batch_done(task.seq, book.lane.name, task.size, seconds)  # may steer the caps
        else:
            self._hooks.duplicate_dropped(book.lane.name)

    def _failed(self, book: LaneBook, task: BatchTask, exc: BaseException) -> None:
        if isinstance(exc, SampleError):  # the batch's own result: a bad sample, named
            self._deliver_error(task.seq, exc)
            return
        book.handed -= 1  # shares count delivered work, not failed attempts
        book.last_error = exc
        attempts = self._attempts[task.seq] = self._attempts.get(task.seq, 0) + 1
        others = [b for b in self._books if b is not book]
        excluded = self._picker.excluded(task.seq)
        state = LaneState(
            fails_in_row=book.fails_in_row,
            lanes=len(self._books),
            others_working=any(not b.broken for b in others),
            others_usable=any(b.usable(excluded) for b in others),
        )
        decision = decide(exc, attempts, state, self._rules)
        book.judged(exc, decision.lane_fault, decision.break_lane, state.others_working)
        if decision.exclude:
            self._picker.exclude(task.seq, book)
        if decision.action is Action.DELIVER:
            if not own_failure(exc):  # the lanes' failure, not the batch's own: say why each lane
                err = self._picker.no_lane_error(task.seq)
                err.__cause__, exc = exc, err
            self._deliver_error(task.seq, exc)
            return
        self._retry_queue.append(task)
        self._hooks.batch_retried(book.lane.name)
        self._mark("retry", seq=task.seq, lane=book.lane.name, attempt=attempts + 1, error=repr(exc))
        log.log(
            logging.INFO if isinstance(exc, Reroute) else logging.WARNING,
            "batch %d failed on lane '%s' (%s: %s); handing it on (attempt %d)",
            task.seq,
            book.lane.name,
            type(exc).__name__,
            exc,
            attempts + 1,
        )

    def _deliver_error(self, seq: int, exc: BaseException) -> None:
        self._mark("error", seq=seq, error=repr(exc))
        self._merger.put(seq, exc, error=True)

    def _mark(self, name: str, **args) -> None:
        if self._hooks.trace is not None:  # rare events: a retry, a re-issue, an error
            self._hooks.trace.instant(name, pass_key=self._merger, **args)
