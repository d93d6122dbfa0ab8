"""Which lane takes a task next, asked on the dispatcher's thread: order, admission shares, stand-by
lanes, exclusions and the device budget (the rules: docs/guide/concepts.md, "How a pass runs")."""

from __future__ import annotations

from typing import Sequence

from hybridload.errors import NoLaneError
from hybridload.lanes._base import LaneKind
from hybridload.execution._admission import ShareAdmission
from hybridload.execution._books import LaneBook, no_lane_error
from hybridload.execution._merge import OrderedMerger


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
        """A GPU lane starts a batch only while buffered GPU batches plus its own in flight fit the
        budget (one always may; one at a time until a batch shows its size)."""
        if self._device_budget is None or book.lane.kind is not LaneKind.GPU:
            return True
        held, size = self._merger.device_bytes(), self._merger.largest_device_batch
        if held == 0 and book.in_flight == 0:
            return True
        return size > 0 and held + (book.in_flight + 1) * size <= self._device_budget
