"""The running copies in a deadline heap, so a wake costs O(log k) per copy due, not a scan of the k
running; entries of ended copies are dropped when they come up."""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Callable, Container, Iterator, Mapping, NamedTuple

from hybridload.execution._retry import StragglerRule


class Watched(NamedTuple):
    """A running copy: ``book`` (the lane's bookkeeping), its start ``t0`` and its ``task``."""

    seq: int
    book: Any
    t0: float
    task: Any


class StragglerWatch:
    """The heap of running copies, ordered by when each is next looked at."""

    def __init__(self, rule: StragglerRule):
        self.rule = rule
        self._heap: list = []
        self._tie = itertools.count()  # entries never compare their payloads

    def __len__(self) -> int:
        return len(self._heap)

    def started(self, copy: Watched) -> None:
        """A copy started; nothing is kept when re-issuing is off."""
        if self.rule.straggler_factor is not None:
            self.again(copy, copy.t0 + self.rule.straggler_min_s)

    def again(self, copy: Watched, at: float) -> None:
        heapq.heappush(self._heap, (at, next(self._tie), copy))

    def overdue(
        self, now: float, running: Mapping[int, list], reissued: Container[int], settled: Callable[[int], bool]
    ) -> Iterator[Watched]:
        """The copies overdue at ``now``, popped one at a time (the caller puts back the last with
        `again` when no lane has a slot); a copy no longer its task's only one running, or whose
        task has a result, is dropped, and one not yet due goes back in at its deadline (``min_s``
        later while its lane's typical time is unknown)."""
        while self._heap and self._heap[0][0] <= now:
            copy = heapq.heappop(self._heap)[2]
            if copy.seq in reissued or running.get(copy.seq) != [(copy.book, copy.t0)] or settled(copy.seq):
                continue
            deadline = self.rule.deadline(copy.t0, copy.book.typical_s)
            if deadline is None or deadline > now:
                self.again(copy, now + self.rule.straggler_min_s if deadline is None else deadline)
                continue
            yield copy
