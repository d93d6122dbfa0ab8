"""What happens to a batch whose lane failed, one pure decision tested as a table (the rules and
their table: docs/guide/concepts.md, "How a pass runs"), and when a slow batch is issued again
(`StragglerRule`)."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from hybridload.errors import SampleError, UserCodeError, WorkerLost
from hybridload.lanes._base import Reroute


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_finite(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


class Action(enum.Enum):
    DELIVER = "deliver"  #: the exception becomes the batch's result
    RETRY = "retry"  #: hand the batch on; the same lane may take it again
    EXCLUDE = "exclude"  #: hand the batch on to another lane
    BREAK = "break"  #: the lane is broken; hand the batch on to another lane


@dataclass(frozen=True)
class RetryRules:
    """Attributes:
    max_retries: how many times a failed batch is handed on (lost workers add one per lane).
    break_after: a lane failing this many tasks in a row gets no more.
    """

    max_retries: int = 3
    break_after: int = 2

    def __post_init__(self):
        if not _is_int(self.max_retries) or self.max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {self.max_retries!r}")
        if not _is_int(self.break_after) or self.break_after < 1:
            raise ValueError(f"break_after must be an int >= 1, got {self.break_after!r}")


@dataclass(frozen=True)
class LaneState:
    """What the decision needs to know about the failed lane and the others.

    Attributes:
        fails_in_row: the lane's failures in a row before this one.
        lanes: how many lanes the pass has.
        others_working: another lane is not broken.
        others_usable: another lane may take this batch (not broken, not excluded for it).
    """

    fails_in_row: int
    lanes: int
    others_working: bool
    others_usable: bool


@dataclass(frozen=True)
class Decision:
    action: Action
    lane_fault: bool  #: the failure counts against the lane (its fails-in-a-row grow)
    break_lane: bool  #: the lane is broken from now on (also when the batch is delivered)
    exclude: bool  #: the lane may not take this batch again

    @property
    def hand_on(self) -> bool:
        return self.action is not Action.DELIVER


def own_failure(exc: BaseException) -> bool:
    """``exc`` is the batch's own result, not its lane's: every copy would end the same way, so it
    is delivered at once."""
    return isinstance(exc, (SampleError, UserCodeError)) or bool(getattr(exc, "batch_at_fault", False))


def decide(exc: BaseException, attempts: int, lane: LaneState, rules: RetryRules = RetryRules()) -> Decision:
    """The fate of a batch whose ``attempts``-th attempt failed with ``exc`` on ``lane``."""
    if own_failure(exc):
        return Decision(Action.DELIVER, lane_fault=False, break_lane=False, exclude=False)
    lost = isinstance(exc, WorkerLost)
    fault = not isinstance(exc, (Reroute, WorkerLost))
    broken = fault and lane.fails_in_row + 1 >= rules.break_after
    exclude = lane.others_working and not lost
    limit = rules.max_retries + (lane.lanes if lost else 0)
    same_lane_may = not broken and not exclude
    if attempts > limit or not (same_lane_may or lane.others_usable):
        return Decision(Action.DELIVER, lane_fault=fault, break_lane=broken, exclude=exclude)
    action = Action.BREAK if broken else Action.EXCLUDE if exclude else Action.RETRY
    return Decision(action, lane_fault=fault, break_lane=broken, exclude=exclude)


@dataclass(frozen=True)
class StragglerRule:
    """Re-issue a task once it ran ``straggler_factor`` x its lane's typical time (at least
    ``straggler_min_s``); ``straggler_factor=None`` turns re-issuing off."""

    straggler_factor: float | None = 4.0
    straggler_min_s: float = 2.0

    def __post_init__(self):
        if self.straggler_factor is not None and (not _is_finite(self.straggler_factor) or self.straggler_factor < 1):
            raise ValueError(f"straggler_factor must be None or a number >= 1, got {self.straggler_factor!r}")
        if not _is_finite(self.straggler_min_s) or self.straggler_min_s < 0:
            raise ValueError(f"straggler_min_s must be a finite number of seconds >= 0, got {self.straggler_min_s!r}")

    def overdue(self, elapsed_s: float, typical_s: float | None) -> bool:
        if self.straggler_factor is None or typical_s is None:
            return False
        return elapsed_s >= max(self.straggler_min_s, self.straggler_factor * typical_s)

    def deadline(self, t0: float, typical_s: float | None) -> float | None:
        """When a task started at ``t0`` becomes overdue; None while that cannot be said."""
        if self.straggler_factor is None or typical_s is None:
            return None
        return t0 + max(self.straggler_min_s, self.straggler_factor * typical_s)
