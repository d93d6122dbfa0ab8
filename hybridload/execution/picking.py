"""Which lane takes a task next: the dispatcher asks, on its thread.

* Lanes are tried in order. A new task starts on a lane only when the pass's admission
  policy lets it (`hybridload.execution.admission`: a capped lane kind's share). A
  fallback lane takes tasks only when no other lane may take them (a retry its lane is
  excluded from), for a straggler's second copy, or while another lane is broken or has no
  worker (a Ray lane without actors: the local stand-in runs its share).
* A lane that failed a batch may be excluded from it (`hybridload.execution.retry.decide`);
  a task no lane can take ends as a `NoLaneError` naming why each lane cannot
  (`hybridload.execution.books`).
* Device memory: with a ``gpu_memory_budget_mb``, a GPU lane starts a task only while the
  GPU bytes of finished batches waiting in the merger plus its own in flight fit in it."""

from __future__ import annotations

from typing import Sequence

from hybridload.errors import NoLaneError
from hybridload.lanes.base import LaneKind
from hybridload.execution.admission import ShareAdmission
from hybridload.execution.books import LaneBook, no_lane_error
from hybridload.execution.merge import OrderedMerger


class LanePicker:
    """Picks the lane book that may start a task now, among a pass's ``books`` (in order)."""

    def __init__(
        self,
        books: Sequence[LaneBook],
        merger: OrderedMerger,
        admission: ShareAdmission,
        device_budget: int | None,
    ):
        self.books = books
        self._merger, self._admission, self._device_budget = merger, admission, device_budget
        self._excluded: dict[int, set[int]] = {}  # seq -> ids of lane books excluded for it

    def excluded(self, seq: int) -> set[int]:
        """The ids of the lane books batch ``seq`` may no longer run on."""
        return self._excluded.get(seq, set())

    def exclude(self, seq: int, book: LaneBook) -> None:
        self._excluded.setdefault(seq, set()).add(id(book))

    def no_lane_left(self, seq: int) -> bool:
        excluded = self.excluded(seq)
        return not any(b.usable(excluded) for b in self.books)

    def no_lane_error(self, seq: int) -> NoLaneError:
        return no_lane_error(seq, self.books, self.excluded(seq))

    def pick(self, excluded: set[int], retry: bool, reissue: bool = False) -> LaneBook | None:
        """A lane with a free slot, device room and (a new task only) the admission's leave."""
        primaries = [b for b in self.books if not b.fallback and b.usable(excluded)]
        candidates = list(primaries)
        if reissue or not primaries or any(b.stands_down() for b in self.books if not b.fallback):
            candidates += [b for b in self.books if b.fallback and b.usable(excluded)]
        total = sum(b.handed for b in self.books)
        for book in candidates:
            if not book.has_slot() or not self.device_room(book):
                continue
            if not retry and not self._admission.can_take(book.lane.kind, book.handed, total):
                continue
            return book
        return None

    def device_room(self, book: LaneBook) -> bool:
        """A GPU lane starts a batch only while the GPU bytes of finished, buffered batches
        plus its batches in flight stay within the device budget (one batch always may; until a
        first batch shows its size, one at a time)."""
        if self._device_budget is None or book.lane.kind is not LaneKind.GPU:
            return True
        held, size = self._merger.device_bytes(), self._merger.largest_device_batch
        if held == 0 and book.in_flight == 0:
            return True
        return size > 0 and held + (book.in_flight + 1) * size <= self._device_budget
