"""The passes of the drop-in `DataLoader` on Ray actors:
`RayPass` (a map-style dataset's batches through a
`BatchStream`, an ``IterableDataset``'s through its actors'
`IterablePass`) and `FailedPass` (the workers
could not start: every batch raises ``worker_init_fn``'s error, as torch's workers answer).

A sampler without ``__len__`` (an infinite one, for iteration-based training) is pulled as the
window reaches it, never listed; such a pass has no ``len()``, as torch's.
"""

from __future__ import annotations

from typing import Any

import torch

from hybridload.errors import BatchTimeoutError
from hybridload.execution import PassConfig
from hybridload.execution.stream import BatchStream
from hybridload.execution.tasks import sampler_tasks
from hybridload.lanes.base import BatchTask
from hybridload.lanes.ray.dataset_lane import IterableDatasetActors
from hybridload.lanes.ray.dataset_worker import Generated, UserFailure

DEFAULT_TIMEOUT_S = 300.0


def batch_size_of(indices) -> int:
    """The samples a batch counts as: batch_size=None fetches one sample per index."""
    return len(indices) if hasattr(indices, "__len__") else 1


class FailedPass:
    """A pass whose workers could not start because ``worker_init_fn`` raised: each of its
    batches raises that error (torch's workers answer every task with an error), then it ends."""

    def __init__(self, failure: UserFailure, sampler):
        self._failure = failure
        try:
            self._left = len(sampler)
        except TypeError:  # an IterableDataset's sampler has no length: one error
            self._left = 1

    def __iter__(self):
        return self

    def __next__(self):
        if self._left <= 0:
            raise StopIteration
        self._left -= 1
        self._failure.reraise()


class RayPass:
    """One pass of a drop-in ``loader`` over ``lane`` (its actor pool), in sampler order: the
    user's errors re-raised with their class, a late batch or a timeout in the drop-in's words;
    the pool closed with the pass unless it is ``loader``'s persistent one (``owns_lane``)."""

    def __init__(self, loader: Any, lane, owns_lane: bool, first: bool):
        self._loader = loader
        self._own, self._lanes = (lane if owns_lane else None), loader._lanes
        sampler_iter = iter(loader._index_sampler)
        if first:  # drawn exactly as torch's _BaseDataLoaderIter draws it (after creating the sampler iterator)
            base_seed = int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item())
            loader._pass_seeds = (base_seed, 0)
        else:  # torch's persistent iterator is reset, not remade: nothing is drawn from the generator
            base_seed, passes = loader._pass_seeds
            loader._pass_seeds = (base_seed, passes + 1)
        timeout = loader.timeout if loader.timeout and loader.timeout > 0 else DEFAULT_TIMEOUT_S
        if isinstance(lane, IterableDatasetActors):
            self._stream = lane.start_pass(base_seed, prefetch=loader._prefetch, timeout_s=timeout,
                                           length=length_of(loader))
        else:
            self._count = length_of(loader._index_sampler)  # None: no len() (an infinite sampler), never listed
            if not first:  # the pass's own seeds, after those of the earlier passes
                stride = max(1, self._count) if self._count is not None else 2 ** 32
                base_seed = (base_seed + loader._pass_seeds[1] * stride) % 2 ** 63
            tasks = sampler_tasks(sampler_iter, loader._index_sampler,  # pulled as the window reaches them
                                  lambda k, b: BatchTask(k, 0, b, size=batch_size_of(b), seed=base_seed + k))
            self._stream = BatchStream([lane], tasks, PassConfig(window=loader.window, timeout_s=timeout),
                                       hooks=loader._stats)
        self._pin = loader.pin_memory and torch.cuda.is_available()
        self._pin_device = loader.pin_memory_device or None
        loader._streams[:] = [st for st in loader._streams if not st.closed] + [self._stream]

    def __iter__(self):
        return self

    def __len__(self) -> int:
        if getattr(self, "_count", 0) is None:  # as torch: len() of a sampler without one
            raise TypeError(f"{type(self._loader._index_sampler).__name__} has no len(): this pass ends where "
                            "its sampler does")
        return len(self._stream)

    def __next__(self) -> Any:
        try:
            batch = next(self._stream)
        except BaseException as exc:
            if self._stream.closed:
                self._release()  # the pass is over: its own (non-persistent) actors go
            if isinstance(exc, BatchTimeoutError) and exc.timeout_s is not None:  # the drop-in's knob: timeout=
                raise BatchTimeoutError(exc.seq, exc.timeout_s, exc.detail, "DataLoader",
                                        "DataLoader(timeout=...)") from None
            raise
        if isinstance(self._stream, BatchStream) and self._stream.position >= len(self._stream):
            self._release()  # the last batch is out: a loop of len(loader) steps (Lightning's) never asks again
        if isinstance(batch, UserFailure):  # the user's code raised for this batch: raise it, the pass goes on
            batch.reraise()
        if isinstance(batch, Generated):  # collate_fn returned a generator: so does the loader, as torch's
            batch = batch.generator()
        if self._pin:
            from torch.utils.data._utils.pin_memory import pin_memory
            batch = pin_memory(batch, self._pin_device)
        return batch

    def _release(self) -> None:
        lane, self._own = self._own, None
        if lane is not None:
            if any(x is lane for x in self._lanes):
                self._lanes.remove(lane)
            lane.close()

    def __del__(self):
        if getattr(self, "_stream", None) is not None:
            self._stream.close()
        if hasattr(self, "_own"):
            self._release()


def length_of(sized) -> int | None:
    """``len(sized)``, None when it has none (an IterableDataset, a sampler without __len__)."""
    try:
        return len(sized)
    except TypeError:
        return None
