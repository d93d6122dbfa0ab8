"""The lane contract, the template every hybridload lane fills in, and the unit of work.

A lane turns `BatchTask` s into batch results. Nothing outside ``lanes/`` looks
at a lane's name to decide what to do with it: what a caller needs to know is in the
contract below.

* ``name`` — a short label for logs and ``stats()`` ("inprocess", "ray", "gpu", ...).
* ``kind`` — a `LaneKind`: where the work runs.
* ``slots`` — tasks the lane accepts at once (the dispatcher never exceeds it).
* ``parallelism`` — tasks it really runs at the same time (for rate estimates).
* ``describe()`` — what really ran, in words ("DALI CPU-only mode, no GPU visible").
* ``run_batch(task)`` — run one task synchronously in the caller's thread and return its
  result (the planner's measurements); raises what ``submit`` would report.
* ``submit(task, done)`` — non-blocking; ``done(task, result_or_exception)`` is called
  exactly once, from any thread (not at all if the lane is closed first).
* ``close()`` — stop, release workers and device memory; idempotent.
* ``cancel(task)`` — the pass that submitted ``task`` was given up: drop it if it has not
  started, stop it early if the lane can; its ``done`` may still be called, and is ignored
  (default: nothing; the lane runs it to the end).
* ``unavailable()`` — why the lane has no worker to take a task now ("" when it has one; the
  Ray lane: nodes lost, actor starts failed, no node with a free CPU), for error messages.

`Lane` states the contract (any class with its methods passes ``isinstance``) and
is the template hybridload's lanes subclass, as torchdata.nodes' ``BaseNode``: the closed
check, the count of tasks in flight and the once-only close are done here, and a lane
fills in ``_start(task, done)`` and ``_close()``.
"""

from __future__ import annotations

import abc
import enum
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from hybridload.errors import HybridLoadError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchTask:
    """One batch to produce: its sequence number in the rank's epoch and its indices.

    Whoever makes the pass's tasks (the loader, the drop-in) sets ``size``, the samples it
    counts as (what the stats count), and ``seed``, the key of the task's randomness: a
    HybridLoader's stream seed (every draw keyed by (seed, epoch, index)), or the drop-in's
    per-batch reseed of ``random``/``numpy``/``torch``. A pass's state (epoch, seed) travels on
    its tasks, never on a lane: a lane serves every pass alike.

    Attributes:
        seq: the batch's position in the rank's pass (``tasks[k].seq == k``).
        epoch: the epoch it belongs to.
        indices: the dataset indices of its samples, in order.
        size: the samples it counts as in the stats.
        seed: the key of the task's randomness (see above).
    """

    seq: int
    epoch: int
    indices: np.ndarray
    size: int = 0
    seed: int = 0


Done = Callable[[BatchTask, object], None]


class Reroute(HybridLoadError):
    """A lane cannot take this batch (a sample its engine cannot decode: not a failure of the
    lane); the dispatcher hands it to another lane. Between the lanes and the dispatcher only:
    where no lane can take the batch, the caller gets a `NoLaneError` whose cause it is."""


class LaneKind(enum.Enum):
    """Where a lane does its work."""

    GPU = "gpu"  #: on this rank's GPU (DALI or the torch engine)
    CPU_ACTORS = "cpu_actors"  #: Ray CPU actors, possibly on other nodes
    CPU_LOCAL = "cpu_local"  #: this machine's CPUs without Ray (threads or processes)


_CONTRACT = ("describe", "run_batch", "submit", "close")


class Lane(abc.ABC):
    """The lane contract, and the template of hybridload's lanes.

    ``submit`` refuses work once the lane is closed (RuntimeError naming the lane), counts
    the task in flight until its ``done`` is called, passes on the first report only (a
    second one is a lane's bug: dropped, with a warning) and hands the task to
    ``_start(task, done)``; a ``_start`` that raises leaves the count as it was and the
    error goes to the caller (the dispatcher reports it as a failed attempt). ``close``
    marks the lane closed once, whichever thread calls it, and then runs ``_close()``;
    later calls return at once.

    A subclass calls ``super().__init__()`` before anything that may close it, and fills
    in ``_start`` (non-blocking), ``_close``, ``run_batch`` and ``describe``. ``self._lock``
    (reentrant) guards the closed flag and the count; a lane may hold it to make its own
    bookkeeping atomic with them (the process lane does).
    """

    name: str
    kind: LaneKind
    slots: int
    parallelism: int

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._closed = False
        self._in_flight = 0

    @classmethod
    def __subclasshook__(cls, other):
        if cls is Lane and all(any(m in k.__dict__ for k in other.__mro__) for m in _CONTRACT):
            return True
        return NotImplemented

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        """Tasks accepted by ``submit`` whose ``done`` has not been called yet."""
        return self._in_flight

    def closed_error(self) -> RuntimeError:
        return RuntimeError(f"the {self.name} lane is closed")

    def submit(self, task: BatchTask, done: Done) -> None:
        """Start ``task`` (non-blocking); ``done(task, result_or_exception)`` is called once."""
        with self._lock:
            if self._closed:
                raise self.closed_error()
            self._in_flight += 1
        fired = False

        def settle() -> bool:
            nonlocal fired
            with self._lock:
                if fired:
                    return False
                fired = True
                self._in_flight -= 1
                return True

        def report(t: BatchTask, result) -> None:
            if settle():
                done(t, result)
            else:
                log.warning("lane %s reported batch %d a second time; that report is dropped", self.name, t.seq)

        try:
            self._start(task, report)
        except BaseException:
            settle()
            raise

    def close(self) -> None:
        """Stop and release the lane's workers and memory. Idempotent, thread-safe."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._close()

    def cancel(self, task: BatchTask) -> None:
        """``task``'s pass was given up: drop it or stop it early where the lane can."""

    def unavailable(self) -> str:
        """Why the lane has no worker for a task now ("" when it has one, or cannot tell)."""
        return ""

    # -- what a lane fills in
    @abc.abstractmethod
    def describe(self) -> str: ...

    @abc.abstractmethod
    def run_batch(self, task: BatchTask): ...

    @abc.abstractmethod
    def _start(self, task: BatchTask, done: Done) -> None:
        """Start ``task`` without blocking; call ``done`` exactly once (the lane is open)."""

    def _close(self) -> None:
        """Release what the lane holds; runs once, after the lane is marked closed."""


class PooledLane(Lane):
    """A lane that runs ``runner(task)`` on its own thread pool (``self._pool``)."""

    _pool: Any  # set by the subclass: an executor, or any pool with submit(fn, task) -> Future

    def _start(self, task: BatchTask, done: Done) -> None:
        submit_to_pool(self._pool, self.runner(task), task, done)

    def runner(self, task: BatchTask) -> Callable[[BatchTask], object]:
        """What the pool runs for ``task`` (``run_batch``); a lane that can start some of the
        work when it accepts the task (its reads) does so here."""
        return self.run_batch


def submit_to_pool(pool, fn, task: BatchTask, done: Done) -> None:
    """Run ``fn(task)`` on a thread pool and report to ``done`` exactly once (not if cancelled)."""
    fut = pool.submit(fn, task)

    def _finish(f):
        if f.cancelled():
            return
        exc = f.exception()
        done(task, exc if exc is not None else f.result())

    fut.add_done_callback(_finish)
