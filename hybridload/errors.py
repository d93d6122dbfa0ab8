"""Errors hybridload raises. Each names what the user needs to find the problem."""

from __future__ import annotations


class HybridLoadError(Exception):
    """Base class of hybridload's own errors."""


class SampleError(HybridLoadError):
    """A sample could not be read or processed.

    Attributes:
        index: the sample's dataset index.
        path: where the sample lives (file path, URL, or a description).
        stage: the processing stage that failed ("read", "decode", a recipe stage name).
    """

    def __init__(self, index: int, path: str, stage: str, reason: str):
        self.index = index
        self.path = path
        self.stage = stage
        self.reason = reason
        super().__init__(f"sample {index} ({path}) failed at stage '{stage}': {reason}")

    def __reduce__(self):  # keep the fields across pickling (Ray, processes)
        return (type(self), (self.index, self.path, self.stage, self.reason))


class BatchTimeoutError(HybridLoadError):
    """A batch never arrived within the loader's timeout."""

    def __init__(self, seq: int, timeout_s: float, detail: str = ""):
        self.seq = seq
        self.timeout_s = timeout_s
        msg = f"batch {seq} did not arrive within {timeout_s:g} s"
        if detail:
            msg += f" ({detail})"
        msg += "; raise LoaderPolicy(batch_timeout_s=...) if batches are legitimately this slow"
        super().__init__(msg)

    def __reduce__(self):
        return (type(self), (self.seq, self.timeout_s))


class LaneUnavailableError(HybridLoadError):
    """A processing lane the policy asked for cannot run here."""


class Reroute(HybridLoadError):
    """A lane cannot take this batch (not a failure of the lane); another lane should."""


class WorkerLost(HybridLoadError):
    """A worker of a lane (a Ray actor, a node) died while it held a batch; the batch is
    handed to another worker and the lane carries on with what is left."""
