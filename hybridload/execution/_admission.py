"""The lane shares as an admission policy the dispatcher asks before a new batch (as Ray Data's
``can_add_input``) and the online planner steers through a `CapsHook`, on the dispatcher's thread
only, so the caps have one writer (docs/decisions/policy-decoded-once.md)."""

from __future__ import annotations

import threading
from typing import Mapping, Protocol

from hybridload.lanes._base import LaneKind


class CapsHook(Protocol):
    """Steers the caps from what the lanes did, on the dispatcher's thread only: it keeps its state
    without a lock and must not block."""

    def batch_done(
        self, seq: int, lane: str, images: int, seconds: float, caps: dict[LaneKind, float]
    ) -> dict[LaneKind, float] | None:
        """Batch ``seq`` finished on ``lane`` (``images`` in ``seconds``) under ``caps`` (a copy):
        the caps to change, or None."""


class ShareAdmission:
    """The share cap of each lane kind (absent: uncapped), asked by the dispatcher.

    Args:
        caps: lane kind -> the most of a pass's handed-out batches its lanes may take, 0..1.
        steer: a `CapsHook` that changes the caps from what the lanes did (None: they stay).
    """

    def __init__(self, caps: Mapping[LaneKind, float] | None = None, *, steer: CapsHook | None = None):
        self._caps: dict[LaneKind, float] = {}
        for kind, share in (caps or {}).items():
            self._caps[_kind(kind)] = _share(share, kind)
        self._steer = steer
        self._lock = threading.Lock()  # for readers on other threads; the writer is the dispatcher's thread

    @property
    def steer(self) -> CapsHook | None:
        """The hook that steers the caps, if any."""
        return self._steer

    def can_take(self, kind: LaneKind, handed: int, total: int) -> bool:
        """Whether a lane of ``kind``, handed ``handed`` of the ``total`` batches so far, may take
        one more within its cap."""
        cap = self._caps.get(kind)  # read on the writer's own thread: no lock needed
        return cap is None or handed + 1 <= cap * (total + 1) + 1e-9

    def share(self, kind: LaneKind) -> float | None:
        """The cap of ``kind`` now, or None when it is uncapped."""
        with self._lock:
            return self._caps.get(kind)

    def snapshot(self) -> dict[LaneKind, float]:
        """A copy of every cap."""
        with self._lock:
            return dict(self._caps)

    def batch_done(self, seq: int, lane: str, images: int, seconds: float) -> None:
        """A batch finished (the dispatcher's thread only): ask the steering hook and write its answer."""
        if self._steer is None:
            return
        for kind, share in (self._steer.batch_done(seq, lane, images, seconds, self.snapshot()) or {}).items():
            share = _share(share, kind)
            with self._lock:
                self._caps[_kind(kind)] = share


def _kind(kind) -> LaneKind:
    if not isinstance(kind, LaneKind):
        raise ValueError(f"ShareAdmission: a cap's key must be a LaneKind (e.g. LaneKind.GPU), got {kind!r}")
    return kind


def _share(share, kind) -> float:
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not (0 <= share <= 1):
        raise ValueError(
            f"ShareAdmission: the cap of {kind!r} must be a share in [0, 1] (0.3: at most 30% of "
            f"the batches), got {share!r}"
        )
    return float(share)
