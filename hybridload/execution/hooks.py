"""What the dispatcher calls, on its own thread: the protocols its callers implement.

* `DispatchHooks` — what happened to the pass's batches (``LoaderStats`` implements
  it; ``record_wait`` is the stream's, on the consumer's thread).
* `CapsHook` — who steers the lane caps (the online planner of ``mode="auto"``)
  registers one with the pass; the dispatcher asks it after every batch it finished and
  writes what it answers into the caps. So the caps have one writer, the dispatcher's
  thread, and the hook sees the batches in the order the dispatcher settled them.

Both are called on the dispatcher's thread only (never two at once for one pass): a hook
keeps its own state without a lock, but must not block (it holds up every lane's work).
"""

from __future__ import annotations

from typing import Protocol

from hybridload.lanes.base import LaneKind


class DispatchHooks(Protocol):
    """What the dispatcher reports (``LoaderStats`` implements it)."""

    def batch_done(self, lane: str, images: int, seconds: float, skipped=()) -> None: ...

    def batch_retried(self, lane: str) -> None: ...

    def batch_reissued(self, lane: str) -> None: ...

    def duplicate_dropped(self, lane: str) -> None: ...

    def record_wait(self, seconds: float) -> None:
        """The consumer waited ``seconds`` for a batch (the stream's, on the consumer's thread)."""

    def pass_ended(self) -> None:
        """The pass delivered its last batch (the stream's, on the consumer's thread)."""


class CapsHook(Protocol):
    """Steers the lane caps from what the lanes did."""

    def batch_done(self, seq: int, lane: str, images: int, seconds: float,
                   caps: dict[LaneKind, float]) -> dict[LaneKind, float] | None:
        """Batch ``seq`` finished on ``lane`` (``images`` samples in ``seconds``), the caps
        being ``caps`` (a copy): the caps to change (kind -> share), or None to keep them."""


class NoHooks:
    """DispatchHooks (and the stream's ``record_wait``) that record nothing."""

    def batch_done(self, lane, images, seconds, skipped=()):
        pass

    def batch_retried(self, lane):
        pass

    def batch_reissued(self, lane):
        pass

    def duplicate_dropped(self, lane):
        pass

    def record_wait(self, seconds):
        pass

    def pass_ended(self):
        pass
