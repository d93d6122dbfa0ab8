"""The lane contract and the unit of work a lane receives.

A lane turns :class:`BatchTask` s into batch results. Nothing outside ``lanes/`` looks
at a lane's name to decide what to do with it: what a caller needs to know is in the
contract below.

* ``name`` — a short label for logs and ``stats()`` ("inprocess", "ray", "gpu", ...).
* ``kind`` — a :class:`LaneKind`: where the work runs.
* ``slots`` — tasks the lane accepts at once (the dispatcher never exceeds it).
* ``parallelism`` — tasks it really runs at the same time (for rate estimates).
* ``describe()`` — what really ran, in words ("DALI CPU-only mode, no GPU visible").
* ``run_batch(task)`` — run one task synchronously in the caller's thread and return its
  result (the planner's measurements); raises what ``submit`` would report.
* ``submit(task, done)`` — non-blocking; ``done(task, result_or_exception)`` is called
  exactly once, from any thread (not at all if the lane is closed first).
* ``close()`` — stop, release workers and device memory; idempotent.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class BatchTask:
    """One batch to produce: its sequence number in the rank's epoch and its indices.

    Whoever makes the pass's tasks (the loader, the drop-in) sets ``size``, the samples it
    counts as (what the stats count), and ``seed``, the pass's seed for this task where the
    lane's workers reseed per task (the drop-in's actors); None: the lane keys its randomness
    by (its seed, epoch, index). A pass's state travels on its tasks, never on a lane."""

    seq: int
    epoch: int
    indices: np.ndarray
    size: int = 0
    seed: int | None = None


Done = Callable[[BatchTask, object], None]


class LaneKind(enum.Enum):
    """Where a lane does its work."""

    GPU = "gpu"                #: on this rank's GPU (DALI or the torch engine)
    CPU_ACTORS = "cpu_actors"  #: Ray CPU actors, possibly on other nodes
    CPU_LOCAL = "cpu_local"    #: this machine's CPUs without Ray (threads or processes)


@runtime_checkable
class Lane(Protocol):
    name: str
    kind: LaneKind
    slots: int
    parallelism: int

    def describe(self) -> str: ...

    def run_batch(self, task: BatchTask): ...

    def submit(self, task: BatchTask, done: Done) -> None: ...

    def close(self) -> None: ...


class PooledLane:
    """``submit`` for lanes that run ``run_batch`` on their own thread pool (``self._pool``),
    refusing work once ``self._closed``."""

    def submit(self, task: BatchTask, done: Done) -> None:
        if self._closed:
            raise RuntimeError(f"the {self.name} lane is closed")
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
