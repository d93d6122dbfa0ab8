"""The lane interface and the unit of work it receives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np


@dataclass(frozen=True)
class BatchTask:
    """One batch to produce: its sequence number in the rank's epoch and its indices."""

    seq: int
    epoch: int
    indices: np.ndarray


Done = Callable[[BatchTask, object], None]


class Lane(Protocol):
    name: str
    slots: int

    def submit(self, task: BatchTask, done: Done) -> None: ...

    def close(self) -> None: ...


def submit_to_pool(pool, fn, task: BatchTask, done: Done) -> None:
    """Run ``fn(task)`` on a thread pool and report to ``done`` exactly once (not if cancelled)."""
    fut = pool.submit(fn, task)

    def _finish(f):
        if f.cancelled():
            return
        exc = f.exception()
        done(task, exc if exc is not None else f.result())

    fut.add_done_callback(_finish)
