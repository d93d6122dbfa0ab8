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
