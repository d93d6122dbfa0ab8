"""A pass's tasks made as the dispatcher reaches them (increasing ``k`` only), never the epoch's
list: `LazyTasks` over computed batches (the keyed order), `StreamedTasks` over an iterator (a batch
sampler, possibly without an end)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Callable, Iterator

from hybridload.lanes._base import BatchTask

Make = Callable[[int, Any], BatchTask]

#: ``len()`` of open-ended tasks until their iterator ends (the most ``len()`` may return).
OPEN_ENDED = sys.maxsize


class TasksEnded(Exception):
    """Open-ended tasks ran out: the pass has ``count`` tasks (raised for ``tasks[count]``)."""

    def __init__(self, count: int):
        super().__init__(f"the tasks ended after {count}")
        self.count = count

    def __reduce__(self):
        return (type(self), (self.count,))


class LazyTasks(Sequence):
    """Task ``k`` is ``make(k, batches[k])``, made when asked (the last one is kept)."""

    def __init__(self, batches: Sequence, make: Make):
        self._batches, self._make = batches, make
        self._last: tuple[int, BatchTask] | None = None

    def __len__(self) -> int:
        return len(self._batches)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        last = self._last
        if last is not None and last[0] == k:
            return last[1]
        if not 0 <= k < len(self):
            raise IndexError(f"task {k} out of range: the pass has {len(self)}")
        task = self._make(k, self._batches[k])
        self._last = (k, task)
        return task


class StreamedTasks(Sequence):
    """Task ``k`` is ``make(k, the iterator's k-th batch)``, pulled in order: only the task last
    made or the next may be asked for; an iterator whose length disagrees with its ``len()`` ends
    the pass with an error saying so.

    Args:
        batches: the batches (the first is pulled at once, so what it draws is drawn where the
            caller made it).
        count: its ``len()``; None: unknown until it ends (``len()`` is `OPEN_ENDED` until then).
        make: ``(k, batch) -> BatchTask``.
        what: names the iterator in errors.
    """

    def __init__(self, batches: Iterator, count: int | None, make: Make, what: str = "the batch iterator"):
        self._open = count is None
        self._it, self._count, self._make, self._what = batches, OPEN_ENDED if count is None else int(count), make, what
        self._k = -1
        self._task: BatchTask | None = None
        self._short: str | None = None
        if self._count > 0:
            try:
                self[0]
            except TasksEnded:  # an open-ended iterator that yields nothing: an empty pass
                pass

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, k):
        if k == self._k:
            return self._task
        if self._open and k >= self._count:
            raise TasksEnded(self._count)
        if k != self._k + 1 or not 0 <= k < self._count:
            raise IndexError(f"task {k}: streamed tasks are made in order (last made: {self._k}, {self._count} in all)")
        if self._short is not None:  # every task past the end the iterator reached fails alike
            self._k, self._task = k, None
            raise RuntimeError(self._short)
        try:
            batch = next(self._it)
        except StopIteration:
            if self._open:  # the count is known now: the pass ends here
                self._count = k
                raise TasksEnded(k) from None
            self._short = (
                f"{self._what} stopped after {k} batches but its len() said {self._count}; "
                "make its __len__ agree with what it yields"
            )
            self._k, self._task = k, None
            raise RuntimeError(self._short) from None
        self._k, self._task = k, self._make(k, batch)
        if k == self._count - 1 and not self._open:
            self._check_exhausted()
        return self._task

    def _check_exhausted(self) -> None:
        try:
            next(self._it)
        except StopIteration:
            return
        raise RuntimeError(
            f"{self._what} yields more batches than its len() ({self._count}); make its "
            "__len__ agree with what it yields"
        )


def sampler_tasks(batches: Iterator, sampler: Any, make: Make) -> Sequence:
    """A pass's tasks over ``batches`` (an iterator of ``sampler``), pulled as the dispatcher
    reaches them; a sampler without ``len()`` gives open-ended tasks.

    Args:
        batches: the sampler's iterator, already made.
        sampler: the (batch) sampler, for its ``len()`` and its name in errors.
        make: ``(k, batch) -> BatchTask``.
    """
    try:
        count = len(sampler)
    except TypeError:  # a sampler without __len__: its end is known when it comes
        count = None
    return StreamedTasks(batches, count, make, what=f"the sampler {type(sampler).__name__}")
