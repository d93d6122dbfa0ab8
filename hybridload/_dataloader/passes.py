"""The drop-in's passes on Ray actors: `RayPass` (a map-style dataset through a `BatchStream`, an
``IterableDataset`` through its actors' `IterablePass`) and `FailedPass` (``worker_init_fn`` raised:
every batch raises it, as torch's workers answer); a sampler without ``len()`` is pulled as the
window reaches it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import torch

from hybridload._compat import torch_pin_memory
from hybridload.errors import BatchTimeoutError
from hybridload._dataloader.handles import worker_handles
from hybridload._dataloader.iterable_pass import IterablePass, warn_past_length
from hybridload._dataloader.pools import IterableDatasetActors
from hybridload._dataloader.worker import Generated, UserFailure
from hybridload.execution import BatchStream, PassConfig, sampler_tasks
from hybridload.lanes import BatchTask

DEFAULT_TIMEOUT_S = 300.0


def batch_size_of(indices) -> int:
    """The samples a batch counts as: batch_size=None fetches one sample per index."""
    return len(indices) if hasattr(indices, "__len__") else 1


class FailedPass:
    """A pass whose workers could not start because ``worker_init_fn`` raised: each of its
    batches raises that error (torch's workers answer every task with an error), then it ends."""

    def __init__(self, failure: UserFailure, sampler):
        self._failure = failure
        iter(sampler)  # as torch's iterator, before its workers start: a stateful sampler's pass begins
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


@dataclass(frozen=True)
class PassSettings:
    """What a pass on actors takes of its loader's arguments.

    Attributes:
        window: batches in flight or buffered ahead (None: the stream's default).
        timeout: the loader's ``timeout`` (0: `DEFAULT_TIMEOUT_S`).
        prefetch: an ``IterableDataset``'s calls queued per worker.
        pin_memory: copy batches into pinned memory (where CUDA is).
        pin_memory_device: torch's argument ("" : the current device).
    """

    window: int | None
    timeout: float
    prefetch: int
    pin_memory: bool = False
    pin_memory_device: str = ""

    @property
    def timeout_s(self) -> float:
        return self.timeout if self.timeout and self.timeout > 0 else DEFAULT_TIMEOUT_S


class RayPass:
    """One pass over ``lane`` of ``batches`` (made before the seed was drawn, as torch's), in
    sampler order, the user's errors re-raised with their class; the pool closes with the pass
    unless the loader keeps it.

    Args:
        seeds: (the workers' base seed, earlier passes over them).
        shared_seed: a DataPipe's seed for this pass, None for another dataset.
        length: the pass's ``len()`` for an ``IterableDataset`` (None: none).
        hooks: the loader's stats.
        pools: the loader's live pools, which the pass leaves when it closes its own.
        streams: the loader's live streams, which the pass joins.
        reported: ``len(dataloader)`` as read before the pass (None: never), past which torch warns.
        _workers: the pool's actors as torch lists its worker processes.
        loader: held while the pass lives, as torch's iterator holds it: else ``for b in
            DataLoader(...)`` would let the loader be collected and its finalizer close the running
            pass.
    """

    def __init__(
        self,
        lane,
        batches: Iterator,
        sampler: Any,
        settings: PassSettings,
        *,
        seeds: tuple[int, int],
        shared_seed: int | None = None,
        length: int | None,
        hooks: Any,
        pools: list,
        streams: list,
        owns_lane: bool,
        loader: Any = None,
        reported: int | None = None,
    ):
        self._loader = loader
        self._workers = worker_handles(lane)  # torch's iterator's list of its workers, read-only stand-ins
        self._reported, self._yielded = reported, 0
        self._sampler = sampler
        self._own, self._lanes = (lane if owns_lane else None), pools
        base_seed, passes = seeds
        timeout = settings.timeout_s
        self._stream: IterablePass | BatchStream
        if isinstance(lane, IterableDatasetActors):
            self._stream = lane.start_pass(
                base_seed, prefetch=settings.prefetch, timeout_s=timeout, length=length, shared_seed=shared_seed
            )
        else:
            self._count = length_of(sampler)  # None: no len() (an infinite sampler), never listed
            if passes:  # the pass's own seeds, after those of the earlier passes
                stride = max(1, self._count) if self._count is not None else 2**32
                base_seed = (base_seed + passes * stride) % 2**63
            tasks = sampler_tasks(
                batches,
                sampler,  # pulled as the window reaches them
                lambda k, b: BatchTask(k, 0, b, size=batch_size_of(b), seed=base_seed + k),
            )
            self._stream = BatchStream(
                [lane], tasks, PassConfig(window=settings.window, batch_timeout_s=timeout), hooks=hooks
            )
        self._pin = settings.pin_memory and torch.cuda.is_available()
        self._pin_device = settings.pin_memory_device or None
        streams[:] = [st for st in streams if not st.closed] + [self._stream]

    def __iter__(self):
        return self

    def __len__(self) -> int:
        if getattr(self, "_count", 0) is None:  # as torch: len() of a sampler without one
            raise TypeError(f"{type(self._sampler).__name__} has no len(): this pass ends where its sampler does")
        return len(self._stream)

    def __next__(self) -> Any:
        try:
            batch = next(self._stream)
        except BaseException as exc:
            if self._stream.closed:
                self._release()  # the pass is over: its own (non-persistent) actors go
            if (
                isinstance(exc, BatchTimeoutError) and exc.seq is not None and exc.timeout_s is not None
            ):  # the drop-in's knob: timeout=
                raise BatchTimeoutError(
                    exc.seq, exc.timeout_s, exc.detail, "DataLoader", "DataLoader(timeout=...)"
                ) from None
            raise
        if isinstance(self._stream, BatchStream) and self._stream.position >= len(self._stream):
            self._release()  # the last batch is out: a loop of len(loader) steps (Lightning's) never asks again
        if isinstance(batch, UserFailure):  # the user's code raised for this batch: raise it, the pass goes on
            batch.reraise()
        if isinstance(self._stream, IterablePass):
            self._yielded += 1
            dataset = getattr(self._loader, "dataset", None)
            warn_past_length(dataset, self._reported, self._yielded, workers=1)  # on workers: torch's words for them
        if isinstance(batch, Generated):  # collate_fn returned a generator: so does the loader, as torch's
            batch = batch.generator()
        if self._pin:
            batch = torch_pin_memory(batch, self._pin_device)
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


def iterable_lengths(loader: Any) -> dict:
    """An ``IterableDataset`` pass's ``length`` and ``reported``; reading the length here must not
    count as the user's, which torch's warning follows."""
    reported = loader._IterableDataset_len_called
    length = length_of(loader)
    loader._IterableDataset_len_called = reported
    return {"length": length, "reported": reported}
