"""A pass's tasks made when the dispatcher reaches them, never the epoch's list.

The dispatcher asks for ``tasks[k]`` in increasing ``k`` (the same ``k`` again while no lane
has a slot) and for ``len(tasks)``; a task it started travels with its running copies, so it
never looks back. Two forms:

* :class:`LazyTasks` — over a sequence of batches that computes each when indexed (the keyed
  order, `hybridload.sampling.keyed_order`): task ``k`` from ``batches[k]``;
* :class:`StreamedTasks` — over an iterator of batches with a known count (the drop-in's
  batch sampler): pulled one at a time; an iterator that ends early, or yields more than its
  count, ends the pass with an error that says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Iterator

from hybridload.lanes.base import BatchTask

Make = Callable[[int, Any], BatchTask]


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
    """Task ``k`` is ``make(k, the iterator's k-th batch)``, pulled in order: ``tasks[k]``
    may be asked for the task last made or the next one only.

    Args:
        batches: the batches (an iterator; the first is pulled at once, so that what it
            draws, e.g. a sampler's seed, is drawn where the caller made it).
        count: how many it yields (``len()`` of its sampler).
        make: ``(k, batch) -> BatchTask``.
        what: names the iterator in errors ("the batch sampler").
    """

    def __init__(self, batches: Iterator, count: int, make: Make, what: str = "the batch iterator"):
        self._it, self._count, self._make, self._what = batches, int(count), make, what
        self._k, self._task = -1, None
        self._short: str | None = None
        if self._count > 0:
            self[0]

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, k):
        if k == self._k:
            return self._task
        if k != self._k + 1 or not 0 <= k < self._count:
            raise IndexError(f"task {k}: streamed tasks are made in order (last made: {self._k}, {self._count} in all)")
        if self._short is not None:  # every task past the end the iterator reached fails alike
            self._k, self._task = k, None
            raise RuntimeError(self._short)
        try:
            batch = next(self._it)
        except StopIteration:
            self._short = (f"{self._what} stopped after {k} batches but its len() said {self._count}; "
                           "make its __len__ agree with what it yields")
            self._k, self._task = k, None
            raise RuntimeError(self._short) from None
        self._k, self._task = k, self._make(k, batch)
        if k == self._count - 1:
            self._check_exhausted()
        return self._task

    def _check_exhausted(self) -> None:
        try:
            next(self._it)
        except StopIteration:
            return
        raise RuntimeError(f"{self._what} yields more batches than its len() ({self._count}); make its "
                           "__len__ agree with what it yields")


def sampler_tasks(batches: Iterator, sampler: Any, make: Make) -> Sequence:
    """A pass's tasks over ``batches`` (an iterator of ``sampler``): :class:`StreamedTasks`
    when the sampler has a ``len()``, else listed up front (its count is known only then).

    Args:
        batches: the sampler's iterator, already made.
        sampler: the (batch) sampler, for its ``len()`` and its name in errors.
        make: ``(k, batch) -> BatchTask``.
    """
    try:
        count = len(sampler)
    except TypeError:  # a sampler without __len__
        return [make(k, b) for k, b in enumerate(batches)]
    return StreamedTasks(batches, count, make, what=f"the sampler {type(sampler).__name__}")
