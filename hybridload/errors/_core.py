"""The error types hybridload raises (`ShutdownError` lives with `close_all` in ``shutdown``)."""

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


class StorageError(SampleError):
    """Reading a sample failed for a reason that is not the sample's: the storage or the
    network (a connection refused or reset, a timeout, a server error), still failing after
    the source's read retries (`hybridload.sources.ReadRetry`). Raised under
    ``on_error="skip"`` too: an outage is not bad data, and skipping it would train on
    zero images.

    Attributes:
        attempts: how many times the read was tried.
        seconds: how long the attempts took, backoff included.
    """

    def __init__(self, index: int, path: str, reason: str, attempts: int, seconds: float):
        self.attempts, self.seconds = attempts, seconds
        super().__init__(
            index,
            path,
            "read",
            f"{reason} (failed {attempts} times over {seconds:.1f} s: the "
            "storage or network failed, not this sample, so on_error='skip' "
            "does not skip it; check the storage, or give the source "
            "read_retry=ReadRetry(attempts=...) to wait longer)",
        )
        self.reason = reason

    def __reduce__(self):
        return (type(self), (self.index, self.path, self.reason, self.attempts, self.seconds))


class OrderMismatchError(HybridLoadError, ValueError):
    """A checkpoint saved with one epoch order ("randperm" or "keyed") was loaded into a
    loader or sampler built with the other: resuming would replay another stream."""

    def __init__(self, saved: str, mine: str, where: str):
        self.saved, self.mine = saved, mine
        super().__init__(
            f"{where}: the state was saved with order={saved!r} but this one has order={mine!r}; "
            f"build it with order={saved!r} to resume (the orders give different streams)"
        )

    def __reduce__(self):
        return (type(self), (self.saved, self.mine, str(self).split(":", 1)[0]))


class ResumeMismatchError(HybridLoadError, ValueError):
    """A checkpoint was loaded into a loader or sampler of another dataset, seed or setting
    (``num_samples``, ``seed``, ``shuffle``, ``drop_last``, the shard-aware split): it would
    resume another epoch order. The world size, rank and batch size may differ (elastic resume).

    Attributes:
        field: the state's field that differs.
        saved: its value in the state.
        mine: this loader's value.
    """

    def __init__(self, field: str, saved, mine, where: str):
        self.field, self.saved, self.mine = field, saved, mine
        if field == "source":
            super().__init__(
                f"{where}: the state was saved over another dataset ({_what_differs(saved, mine)}): "
                f"source={saved!r} then, source={mine!r} now; resume it over the dataset it was saved over"
            )
            return
        super().__init__(
            f"{where}: the state was saved with {field}={saved!r} but this one has {field}={mine!r}; "
            f"build it with {field}={saved!r} (the same dataset and seed) to resume"
        )

    def __reduce__(self):
        return (type(self), (self.field, self.saved, self.mine, str(self).split(":", 1)[0]))


def _what_differs(saved: object, mine: object) -> str:
    """What of two `Source.fingerprint` strings differs, in words."""

    def parts(fp: object) -> tuple[str | None, dict[str, str]]:
        if not isinstance(fp, str) or "; " not in fp:
            return None, {}
        kind, *rest = fp.split("; ")
        return kind, {p.partition(": ")[0]: p.partition(": ")[2] for p in rest}

    (kind_a, a), (kind_b, b) = parts(saved), parts(mine)
    if kind_a != kind_b:
        then, now = (f"{'an' if k[0] in 'AEIOU' else 'a'} {k}" if k else "another source" for k in (kind_a, kind_b))
        return f"{then} then, {now} now"
    names = [k for k in a if a[k] != b.get(k)] + [k for k in b if k not in a]
    if not names:
        return "its fingerprint differs"
    return f"its {' and '.join(names) if len(names) < 3 else ', '.join(names[:-1]) + ' and ' + names[-1]} differ"


class BatchTimeoutError(HybridLoadError, RuntimeError):
    """A batch never arrived within the loader's timeout. A RuntimeError whose message begins as
    torch's DataLoader's for a batch past its ``timeout`` ("DataLoader timed out after N
    seconds"), naming the knob of the loader that raised it. Built from its message alone too
    (``BatchTimeoutError(str(exc))``, as torch's ``ExceptionWrapper`` rebuilds an error).

    Attributes:
        seq: the batch's position in the pass (None when rebuilt from a message).
        timeout_s: the timeout that passed (None when rebuilt from a message).
        detail: where the batch was (the lane that held it).
        loader: the loader that waited ("HybridLoader", "DataLoader").
        knob: the setting that raises the timeout.
    """

    def __init__(
        self,
        seq: int | str,
        timeout_s: float | None = None,
        detail: str = "",
        loader: str = "HybridLoader",
        knob: str = "LoaderPolicy(batch_timeout_s=...)",
    ):
        self.detail, self.loader, self.knob = detail, loader, knob
        self.seq: int | None = None
        self.timeout_s: float | None = None
        if timeout_s is None:  # rebuilt from its message alone
            super().__init__(str(seq))
            return
        self.seq, self.timeout_s = int(seq), timeout_s
        msg = f"{loader} timed out after {timeout_s:g} seconds: batch {seq} did not arrive within {timeout_s:g} s"
        if detail:
            msg += f" ({detail})"
        msg += f"; raise {knob} if batches are legitimately this slow"
        super().__init__(msg)

    def __reduce__(self):
        if self.timeout_s is None:
            return (type(self), (str(self), None, self.detail, self.loader, self.knob))
        return (type(self), (self.seq, self.timeout_s, self.detail, self.loader, self.knob))


class LaneUnavailableError(HybridLoadError):
    """A processing lane the policy asked for cannot run here."""


class NoActorsError(LaneUnavailableError, RuntimeError):
    """The Ray cluster gives this rank no CPU actor (no node with a free CPU, or none within
    the wait the policy allows) and the policy says not to run on this machine meanwhile
    (``LoaderPolicy(on_no_actors="raise")`` or ``"wait"``). The message says what is missing
    and what to do."""


class NoLaneError(HybridLoadError, RuntimeError):
    """No lane can run a batch: each one is broken, failed this batch, or has no worker.

    Attributes:
        seq: the batch's position in the pass.
        reasons: ``{lane name: why it cannot take the batch}``.
    """

    def __init__(self, seq: int, reasons: dict, advice: str = ""):
        self.seq, self.reasons, self.advice = seq, dict(reasons), advice
        why = "; ".join(f"lane '{name}': {reason}" for name, reason in self.reasons.items())
        super().__init__(f"batch {seq} cannot run: no lane can take it ({why})" + (f". {advice}" if advice else ""))

    def __reduce__(self):
        return (type(self), (self.seq, self.reasons, self.advice))


class WorkerLost(HybridLoadError, RuntimeError):
    """A worker of a lane died while it held a batch, which is handed on while a worker is left; a
    RuntimeError in torch's words once none is, or once the batch is blamed
    (docs/decisions/deaths-two-crashes-or-four-kills.md).

    Attributes:
        batch_at_fault: the batch killed its workers (two crashes, or four deaths of any kind):
            it is not handed on again.
    """

    def __init__(self, message: str = "", batch_at_fault: bool = False):
        super().__init__(message)
        self.batch_at_fault = batch_at_fault

    def __reduce__(self):
        return (type(self), (str(self), self.batch_at_fault))


class UserCodeError(HybridLoadError, RuntimeError):
    """The user's code (a dataset's ``__getitem__``, a collate function) raised, or returned
    a value hybridload cannot use. Deterministic: delivered once at its batch's position,
    never retried. A RuntimeError, as torch's DataLoader raises for an exception that cannot
    be rebuilt with its own class; the drop-in ``hybridload.DataLoader`` re-raises the original
    class where it can, as torch does.

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


class ManifestError(HybridLoadError, ValueError):
    """A shard manifest (``{"wids_version": 1, "shardlist": [...]}``) that cannot be used: not
    found, not JSON, or an entry without a ``url`` string and an ``nsamples`` count. The
    message names the manifest and the entry."""


class ShardIndexError(UserCodeError, ValueError):
    """A shard disagrees with its manifest at first touch (missing, unreadable, another sample
    count) or changed after a worker indexed it. Deterministic, so never retried: delivered at
    its batch's position, also under ``on_error="skip"``.

    Attributes:
        where: the shard (``"shard 12 ('s3://b/x-000012.tar') of manifest 'm.json'"``).
        reason: what disagrees, and what to do (rebuild the manifest with ``hybridload index``).
    """
