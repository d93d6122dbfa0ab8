"""`DispatchHooks`, what the dispatcher reports, called on its thread only (never two at once for a
pass): a hook keeps its state without a lock and must not block, as it holds up every lane's work."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from hybridload.execution._trace import Tracer


class DispatchHooks(Protocol):
    """What the dispatcher reports (``LoaderStats`` implements it)."""

    #: the pass's trace while one records (`hybridload.execution._trace`), else None: one attribute read a batch
    trace: Tracer | None

    def batch_done(self, lane: str, images: int, seconds: float, skipped=()) -> None: ...

    def batch_retried(self, lane: str) -> None: ...

    def batch_reissued(self, lane: str) -> None: ...

    def duplicate_dropped(self, lane: str) -> None: ...

    def record_wait(self, seconds: float) -> None:
        """The consumer waited ``seconds`` for a batch (the stream's, on the consumer's thread)."""

    def pass_ended(self) -> None:
        """The pass delivered its last batch (the stream's, on the consumer's thread)."""


class NoHooks:
    """DispatchHooks (and the stream's ``record_wait``) that record nothing."""

    trace: Tracer | None = None

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
