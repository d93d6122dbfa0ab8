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


class UserCodeError(HybridLoadError):
    """The user's code (a dataset's ``__getitem__``, a collate function) raised, or returned
    a value hybridload cannot use. Deterministic: delivered once at its batch's position,
    never retried.

    Attributes:
        where: what ran (``"batch 3 (indices [12, 7])"``, ``"sample 5 (MyDataset[5])"``).
        reason: the original exception as ``Type: message``.
        traceback_text: the original traceback, formatted where it was raised.
    """

    def __init__(self, where: str, reason: str, traceback_text: str = ""):
        self.where, self.reason, self.traceback_text = where, reason, traceback_text
        msg = f"{where}: {reason}"
        if traceback_text:
            msg += "\n\nOriginal traceback (from the worker):\n" + traceback_text.rstrip()
        super().__init__(msg)

    def __reduce__(self):
        return (type(self), (self.where, self.reason, self.traceback_text))


class LabelError(UserCodeError, ValueError):
    """A sample's label is not an integer class index (a string, a float, a one-hot vector).
    Raised under ``on_error="skip"`` too: a wrong label type is a bug of the dataset, not a
    bad sample."""
