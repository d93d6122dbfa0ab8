"""`BatchResult`: what every engine's batch job hands its lane and every lane the merger, on a floor
of its own below the engines and lanes so each imports it downward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch and numpy are the caller's: this module imports neither
    import numpy as np
    import torch


@dataclass
class BatchResult:
    """A processed batch: images (torch tensor), labels and indices (int64 arrays)."""

    images: torch.Tensor
    labels: np.ndarray
    indices: np.ndarray
    skipped: list = field(default_factory=list)  # (index, path, stage, reason) per substituted sample
    seconds: float = 0.0  # the batch's work, reads included, on the worker's clock
    lane: str = ""
    worker: str = ""  # who ran it (a thread, a worker process, an actor), for the trace; "": the lane
    node: str = ""  # the machine it ran on, for the trace; "": the trainer's
    #: of ``seconds``, the time spent waiting for the samples' bytes; the rest is decode+augment.
    #: None: the lane cannot tell them apart (the trace then draws one span for the batch)
    read_seconds: float | None = None
