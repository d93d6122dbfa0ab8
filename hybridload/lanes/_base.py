"""The lane contract, the `Lane` template every lane fills in, and `BatchTask`, the unit of work;
nothing outside ``lanes/`` decides by a lane's name."""

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
    """One batch to produce; its pass's state (epoch, seed) travels on it, never on a lane, so a
    lane serves every pass alike.

    Attributes:
        seq: the batch's position in the rank's pass (``tasks[k].seq == k``).
        epoch: the epoch it belongs to.
        indices: the dataset indices of its samples, in order.
        size: the samples it counts as in the stats.
        seed: the key of its randomness: a HybridLoader's stream seed, or the drop-in's per-batch
            reseed.
    """

    seq: int
    epoch: int
    indices: np.ndarray
    size: int = 0
    seed: int = 0


Done = Callable[[BatchTask, object], None]


class Reroute(HybridLoadError):
    """A lane cannot take this batch (a sample its engine cannot decode, no failure of the lane):
    the dispatcher hands it on; never raised to users, only as the cause of a `NoLaneError`."""


class LaneKind(enum.Enum):
    """Where a lane does its work."""

    GPU = "gpu"  #: on this rank's GPU (DALI or the torch engine)
    CPU_ACTORS = "cpu_actors"  #: Ray CPU actors, possibly on other nodes
    CPU_LOCAL = "cpu_local"  #: this machine's CPUs without Ray (threads or processes)


_CONTRACT = ("describe", "run_batch", "submit", "close")


class Lane(abc.ABC):
    """The lane contract (any class with its methods passes ``isinstance``) and the template of
    hybridload's lanes, as torchdata.nodes' ``BaseNode``.

    The contract: ``name`` (for logs and ``stats()``), ``kind`` (a `LaneKind`), ``slots`` (tasks it
    accepts at once), ``parallelism`` (tasks it really runs at once, for rates), ``describe()``
    (what really ran, in words), ``run_batch(task)`` (one task in the caller's thread: the planner's
    probe), ``submit(task, done)`` (non-blocking; ``done(task, result_or_exception)`` once, from any
    thread, not at all once closed), ``close()`` (idempotent), ``cancel(task)`` (its pass was given
    up: drop or stop it where the lane can) and ``unavailable()`` (why no worker now, for error
    messages).

    The template refuses work once closed, counts tasks in flight, passes on the first report only
    (a second is dropped with a warning) and closes once; a subclass calls ``super().__init__()``
    first and fills in ``_start`` (non-blocking), ``_close``, ``run_batch`` and ``describe``.
    ``self._lock`` (reentrant) guards the flag and the count, and a lane may hold it to make its own
    bookkeeping atomic with them."""

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
        """What the pool runs for ``task``; a lane that can start part of the work at once (its
        reads) does so here."""
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
