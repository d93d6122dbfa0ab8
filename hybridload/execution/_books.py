"""The dispatcher's bookkeeping per lane (failures, when it breaks), cancelling copies, and the
`NoLaneError` saying why each lane cannot run a batch."""

from __future__ import annotations

import logging
from typing import Sequence

from hybridload.errors import NoLaneError
from hybridload.lanes._base import BatchTask, Lane

log = logging.getLogger(__name__)

NO_WORKER_ADVICE = (
    "add or restart worker nodes (`ray start --address=<head>:<port>`), or let such batches run on "
    "this machine meanwhile: LoaderPolicy(on_no_actors='local')"
)
BROKEN_ADVICE = (
    "a broken lane's last error says what failed; LoaderPolicy(max_retries=..., break_after=...) allow more attempts"
)


def cancel_at_lanes(out: Sequence[tuple[Lane, BatchTask]], what: str) -> None:
    """Cancel each (lane, task) copy in ``out`` at its lane; ``what``: which batches, in words, for the log."""
    for lane, task in out:
        try:
            lane.cancel(task)
        except Exception:  # a lane failing to cancel still runs the task to its end: nothing lost
            log.warning("lane '%s' failed to cancel batch %d %s", lane.name, task.seq, what, exc_info=True)


class LaneBook:
    """The dispatcher's bookkeeping for one lane (changed on the dispatcher's thread only)."""

    def __init__(self, lane: Lane, fallback: bool):
        self.lane = lane
        self.fallback = fallback
        self.in_flight = 0  # copies of tasks running on it now
        self.handed = 0  # tasks it took, failed attempts not counted (shares)
        self.fails_in_row = 0
        self.typical_s: float | None = None  # EWMA of its task seconds
        self.broken = False
        self.last_error: BaseException | None = None

    def usable(self, excluded: set[int]) -> bool:
        return not self.broken and id(self) not in excluded and self.lane.slots > 0

    def has_slot(self) -> bool:
        return self.in_flight < self.lane.slots

    def stands_down(self) -> bool:
        """Broken, or no worker now: a stand-by lane stands in for it."""
        return self.broken or self.lane.slots <= 0

    def judged(self, exc: BaseException, lane_fault: bool, break_lane: bool, others_working: bool) -> None:
        """Count a failure as `retry.decide` judged it: one more in a row when the lane is at fault;
        broken when it says so."""
        if lane_fault:
            self.fails_in_row += 1
        if break_lane and not self.broken:
            self.broken = True
            log.warning(
                "lane '%s' failed %d tasks in a row (last: %s: %s); it gets no more tasks%s",
                self.lane.name,
                self.fails_in_row,
                type(exc).__name__,
                exc,
                ", the other lanes carry on" if others_working else "",
            )

    def why_not(self, excluded: bool) -> tuple[str, str]:
        """Why this lane cannot take a batch it is ``excluded`` from (or not): (reason, advice)."""
        last = f"{type(self.last_error).__name__}: {self.last_error}" if self.last_error is not None else "?"
        if self.broken:
            return f"broken after {self.fails_in_row} failed batches in a row (last: {last})", BROKEN_ADVICE
        if self.lane.slots <= 0 and not excluded:
            why = getattr(self.lane, "unavailable", lambda: "")() or "no worker"
            return why, NO_WORKER_ADVICE
        if excluded or self.last_error is not None:
            return f"it failed this batch or the last one it ran ({last})", BROKEN_ADVICE
        return "free, but the batch ran out of attempts", BROKEN_ADVICE


def no_lane_error(seq: int, books: Sequence[LaneBook], excluded: set[int]) -> NoLaneError:
    """The error for batch ``seq`` that no lane can take: each lane's reason, and what to do."""
    reasons, advice = {}, []
    for b in books:
        why, todo = b.why_not(id(b) in excluded)
        reasons[b.lane.name] = why
        if todo and todo not in advice:
            advice.append(todo)
    return NoLaneError(seq, reasons, "What to do: " + "; ".join(advice) if advice else "")
