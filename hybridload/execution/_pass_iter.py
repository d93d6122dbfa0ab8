"""`PassIterator`, a pass's results delivered under its own epoch and seed, and `shut_dropped`,
which closes the pass and lanes of a loader dropped without ``close()``."""

from __future__ import annotations

from typing import Any, Callable

from hybridload.errors import close_all, take_all
from hybridload.execution._stream import BatchStream
from hybridload.lanes._build import close_lanes
from hybridload.sampling._pass_state import Pass


class PassIterator:
    """The stream's results delivered by ``deliver(result, self)`` under the pass's own epoch and
    seed, whatever ``set_epoch`` says meanwhile; ``pass_`` is the sampler's `Pass` handle, which
    says when a newer pass or a load superseded it."""

    def __init__(self, deliver: Callable[[Any, PassIterator], Any], stream: BatchStream, pass_: Pass, seed: int):
        self._deliver, self._stream = deliver, stream
        self.pass_, self.seed = pass_, seed
        self._ended_first = False  # the stream had ended when the pass was superseded: it keeps its own answer

    id = property(lambda self: self.pass_.id)
    epoch = property(lambda self: self.pass_.epoch)

    def __iter__(self):
        return self

    def __next__(self):
        self.check()
        try:
            result = next(self._stream)
        except Exception:  # StopIteration too: a stream closed under its reader by the pass that superseded it
            self.check()
            raise
        return self._deliver(result, self)

    def check(self) -> None:
        """RuntimeError, naming what superseded this pass, once a newer one did."""
        if self.pass_.superseded_by is not None and not self._ended_first:
            raise RuntimeError(
                f"this iterator (pass {self.id}, epoch {self.epoch}) was superseded by {self.pass_.superseded_by}: a "
                "loader runs one pass at a time, the newest; iterate one loader per thread"
            ) from None

    def buffered(self) -> int:
        """Finished batches waiting to be delivered (bounded by the policy's window)."""
        return self._stream.buffered()

    def finish(self) -> None:
        """Close the pass; superseded, its next ``next()`` raises that unless it had ended already."""
        self._ended_first = self._stream.closed
        self._stream.close()


def shut_dropped(streams: list, lanes: list, log: Any) -> None:
    """Stop the dropped loader's dispatcher before its lanes, so closing them is no lane failure;
    failures to close go to ``log`` (nobody to raise to)."""
    close_all(take_all(streams), "closing the pass of a HybridLoader dropped without close()", log=log)
    close_lanes(lanes)
