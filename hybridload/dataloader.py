"""``hybridload.DataLoader``: torch's DataLoader whose workers can be Ray actors.

With ``distribute_mode=False`` it *is* torch's DataLoader. With ``distribute_mode=True``
the batches of its (batch) sampler are sent, as index lists, to a pool of Ray actors
holding the dataset and the collate function; results come back in sampler order
through the ordered merger. Compared with Dpex:

* seeds: each batch's worker reseeds ``random``, ``numpy`` and ``torch`` with
  ``base_seed + batch number`` (``base_seed`` drawn as torch draws it, once per iterator),
  so no two batches share a seed and a batch's randomness does not depend on which actor
  ran it; the seed travels with the batch's task, so two live iterators of one
  ``persistent_workers=True`` loader keep their own;
* data: actors read through the dataset object on their own node; nothing is read in
  the driver and shipped;
* shutdown: actors are killed on ``close()``, garbage collection and interpreter exit;
* waiting: no fixed queue timeout; a batch that does not arrive within ``timeout``
  seconds (default 300 when 0 is given) raises an error naming it;
* errors: an exception of the user's ``__getitem__`` or collate surfaces once, as a
  :class:`~hybridload.errors.UserCodeError` naming the batch and its indices with the
  original traceback (deterministic: never retried);
* workers: ``num_workers`` is a request; with fewer free CPU slots, as many actors as fit
  run (one warning). Inside an actor ``torch.utils.data.get_worker_info()`` gives its id,
  ``num_workers``, the batch's seed and the dataset, and ``worker_init_fn(id)`` runs there
  first, so what it sets is seen by ``__getitem__``;
* other arguments: ``prefetch_factor`` sets the window (``num_actors * prefetch_factor``
  batches ahead); ``persistent_workers`` as torch: False (the default) gives each pass
  (each ``iter(loader)``) its own actors, killed when the pass ends or its iterator is
  dropped; True keeps one set of actors across passes until ``close()`` (faster epochs);
  ``pin_memory`` and ``pin_memory_device`` pin each delivered batch as torch's pin thread
  does; ``in_order=False`` is accepted and batches still come in sampler order (what it
  allows, not what it asks: the window keeps the actors busy past a slow batch);
  ``multiprocessing_context`` and an ``IterableDataset`` are refused in
  ``distribute_mode`` (there are no worker processes to configure, and an iterable dataset
  has no indices to send);
* stopping: ``close()`` (or garbage collection) stops every pass before killing actors;
  ``next()`` on an iterator after ``close()`` raises a RuntimeError naming ``close()``.
"""

from __future__ import annotations

import logging
import random
import traceback
import weakref
from typing import Any, Callable

import numpy as np
import torch
import torch.utils.data as tud

from hybridload.errors import HybridLoadError, UserCodeError, close_all, take_all
from hybridload.lanes.ray.actor_pool import ActorPool
from hybridload.lanes.ray.worker import PoolWorker
from hybridload.lanes.base import BatchTask
from hybridload.sampling.sharding import resolve_rank
from hybridload.execution.stats import LoaderStats
from hybridload.execution.stream import BatchStream
from hybridload.execution.tasks import sampler_tasks

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 300.0


class DatasetWorker(PoolWorker):
    """The actor: ``collate_fn([dataset[i] for i in indices])`` with per-batch seeding, torch's
    worker info set, and the user's errors wrapped in :class:`UserCodeError`."""

    def __init__(self, dataset, collate_fn, worker_init_fn, auto_collation, worker_id: int = 0, num_workers: int = 1):
        super().__init__()
        self.dataset, self.collate_fn, self.auto = dataset, collate_fn, auto_collation
        self.worker_id, self.num_workers = worker_id, num_workers
        _set_worker_info(worker_id, num_workers, worker_id, dataset)
        if worker_init_fn is not None:
            worker_init_fn(worker_id)

    def run(self, indices, seed: int, seq: int = 0):
        random.seed(seed)
        np.random.seed(seed % (2 ** 32))
        torch.manual_seed(seed)
        _set_worker_info(self.worker_id, self.num_workers, seed, self.dataset)
        where = f"batch {seq}"
        try:
            if not self.auto:
                where = f"batch {seq} (indices {_short(indices)}), in dataset[indices] or collate_fn"
                return self.collate_fn(self.dataset[indices])
            samples = []
            for i in indices:
                where = f"batch {seq} (indices {_short(indices)}), sample {i}: dataset[{i}]"
                samples.append(self.dataset[i])
            where = f"batch {seq} (indices {_short(indices)}): collate_fn"
            return self.collate_fn(samples)
        except HybridLoadError:
            raise
        except Exception as exc:  # the user's code: deterministic, delivered once with its traceback
            raise UserCodeError(where, f"{type(exc).__name__}: {exc}", traceback.format_exc()) from None


def _size(indices) -> int:
    """The samples a batch counts as: batch_size=None fetches one sample per index."""
    return len(indices) if hasattr(indices, "__len__") else 1


def _short(indices) -> str:
    if not hasattr(indices, "__len__"):  # batch_size=None: one sample index
        return str(indices)
    shown = [int(i) for i in list(indices)[:16]]
    return f"{shown}" if len(indices) <= 16 else f"{shown[:-1]} ... ({len(indices)} in all)"


def _set_worker_info(worker_id: int, num_workers: int, seed: int, dataset) -> None:
    """What ``torch.utils.data.get_worker_info()`` returns inside the actor."""
    from torch.utils.data._utils import worker as torch_worker
    torch_worker._worker_info = torch_worker.WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed,
                                                        dataset=dataset)


class _DatasetLane(ActorPool):
    name = "ray-dataset"

    def __init__(self, loader: "DataLoader", rank: int, world_size: int):
        super().__init__(DatasetWorker, (loader.dataset, loader.collate_fn, loader.worker_init_fn,
                                          loader._auto_collation),
                         ray_address=loader.head_address, placement=loader.placement,
                         reserve_local_cpus=loader.reserve_local_cpus,
                         cpu_actors=loader.num_actors, rank=rank, world_size=world_size,
                         fallback_embedded=(loader.head_address == "auto"), pass_worker_index=True,
                         fit_request=True)

    def call(self, actor, task: BatchTask):
        return actor.run.remote(task.indices, task.seed, task.seq)  # the pass's seed, on its task


class DataLoader(tud.DataLoader):
    """torch.utils.data.DataLoader with Ray actors as workers when ``distribute_mode=True``.

    The arguments up to ``in_order`` are torch's, with torch's meaning; with
    ``distribute_mode=False`` the loader is plain torch.

    Args:
        dataset: a map-style dataset (``__getitem__`` and ``__len__``; ``__getitems__`` when it
            has one).
        batch_size: samples per batch; None: no batching (one sample at a time).
        shuffle: a new random order every epoch.
        sampler: the order of indices (e.g. a ``DistributedSampler``, or a list).
        batch_sampler: yields whole batches of indices (instead of ``batch_size``/``sampler``).
        num_workers: the workers asked for: Ray actors with ``distribute_mode=True``, processes
            otherwise.
        collate_fn: merges a list of samples into a batch (torch's default collate if None).
        pin_memory: copy batches into pinned memory.
        drop_last: drop the last partial batch.
        timeout: seconds to wait for a batch from the workers (0: the default bound, 300 s
            with ``distribute_mode=True``).
        worker_init_fn: called in each worker with its id before it loads data.
        multiprocessing_context: torch's worker start method (worker processes only).
        generator: the random generator for the sampler and the workers' base seed.
        prefetch_factor: batches loaded ahead per worker.
        persistent_workers: keep the workers alive across epochs.
        pin_memory_device: the device to pin for (torch's argument).
        in_order: yield batches in sampler order (torch's argument).
        distribute_mode: False → plain torch behaviour; True → Ray actors.
        head_address: "auto" joins the cluster named by ``RAY_ADDRESS``, else the one this
            user started on this machine with ``ray start`` (Ray's record of it,
            ``$RAY_TMPDIR/ray/ray_current_cluster`` or ``/tmp/ray/ray_current_cluster``,
            served by a process ``ray start`` started; see :mod:`hybridload.cluster.ray_start`); with
            neither, an embedded cluster on 127.0.0.1 for this process. Never a cluster
            another process started with ``ray.init()`` or ``ray.cluster_utils.Cluster``. "host:port": that cluster; None: RAY_ADDRESS, else embedded.
        num_actors: actors for this process; None → ``num_workers`` if > 0, else a fair
            share of the cluster's CPUs (divided among DDP ranks).
        placement: where the actors go: "remote-first", "any" or "local", as in LoaderPolicy.
        reserve_local_cpus: CPUs on this node kept free for training, as in LoaderPolicy.
        window: batches in flight or buffered ahead of the consumer (default 2 per actor).
    """

    def __init__(self, dataset: tud.Dataset, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler: tud.Sampler | Any = None, batch_sampler: tud.Sampler | Any = None, num_workers: int = 0, collate_fn: Callable | None = None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn: Callable | None = None, multiprocessing_context: Any = None,
                 generator: torch.Generator | None = None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True, distribute_mode: bool = False,
                 head_address: str | None = "auto",
                 num_actors: int | None = None, placement: str = "remote-first", reserve_local_cpus: int = 0,
                 window: int | None = None):
        if num_workers < 0:  # as torch (which sees num_workers=0 under distribute_mode): its class and words
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
        self.distribute_mode = bool(distribute_mode)
        self.head_address = head_address
        self.num_actors = num_actors if num_actors is not None else (num_workers or None)
        self.placement = placement
        self.reserve_local_cpus = reserve_local_cpus
        self.window = window
        if self.distribute_mode:
            if isinstance(dataset, tud.IterableDataset):
                raise TypeError("DataLoader: distribute_mode=True needs a map-style dataset (indices are sent to "
                                f"the actors); {type(dataset).__name__} is an IterableDataset: use "
                                "distribute_mode=False, or give it __len__ and __getitem__")
            if multiprocessing_context is not None:
                raise ValueError("DataLoader: multiprocessing_context has no effect with distribute_mode=True (the "
                                 "workers are Ray actors, not processes this loader starts); leave it None")
            if prefetch_factor is not None and (not isinstance(prefetch_factor, int) or prefetch_factor < 1):
                raise ValueError(f"DataLoader: prefetch_factor must be an int >= 1, got {prefetch_factor!r}")
            if window is None and prefetch_factor is not None:
                self.window = prefetch_factor * max(1, self.num_actors or 1)
            if persistent_workers and not self.num_actors:
                raise ValueError("DataLoader: persistent_workers=True needs num_workers > 0 (or num_actors), as in "
                                 "torch; give num_workers")
        self._persistent_actors = bool(persistent_workers)
        if self.distribute_mode:
            # torch must not start its own worker processes: the actors are the workers
            num_workers, prefetch_factor, persistent_workers, multiprocessing_context = 0, None, False, None
        super().__init__(dataset, batch_size=batch_size, shuffle=shuffle, sampler=sampler,
                         batch_sampler=batch_sampler, num_workers=num_workers, collate_fn=collate_fn,
                         pin_memory=pin_memory, drop_last=drop_last, timeout=timeout,
                         worker_init_fn=worker_init_fn, multiprocessing_context=multiprocessing_context,
                         generator=generator, prefetch_factor=prefetch_factor,
                         persistent_workers=persistent_workers, pin_memory_device=pin_memory_device,
                         in_order=in_order)
        self._lanes: list = []    # the actor pools: one (persistent) or one per live pass
        self._streams: list = []  # the live passes' streams, stopped before the lanes close
        self._stats = LoaderStats()
        self._finalizer = weakref.finalize(self, _close_all, self._streams, self._lanes)

    def __iter__(self):
        if not self.distribute_mode:
            return super().__iter__()
        if self._persistent_actors and self._lanes:
            return _RayDataLoaderIter(self, self._lanes[0], owns_lane=False)
        rank, world = resolve_rank()
        lane = _DatasetLane(self, rank, world)
        self._lanes.append(lane)
        return _RayDataLoaderIter(self, lane, owns_lane=not self._persistent_actors)

    def stats(self) -> dict:
        return self._stats.as_dict()

    def close(self) -> None:
        """Stop every pass and kill the actors (a later iteration starts new ones). Idempotent.
        Every part is closed even when one fails to; a ShutdownError then names each that did."""
        close_all([*take_all(self._streams), *take_all(self._lanes)], "DataLoader.close()")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _close_all(streams: list, lanes: list) -> None:
    """A DataLoader dropped without close(): passes first, then actors; failures are logged."""
    close_all([*take_all(streams), *take_all(lanes)], "closing a DataLoader dropped without close()", log=log)


class _RayDataLoaderIter:
    def __init__(self, loader: DataLoader, lane: _DatasetLane, owns_lane: bool):
        self._loader = loader
        self._own, self._lanes = (lane if owns_lane else None), loader._lanes
        sampler_iter = iter(loader._index_sampler)
        # drawn exactly as torch's _BaseDataLoaderIter draws it (after creating the sampler iterator)
        base_seed = int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item())
        tasks = sampler_tasks(sampler_iter, loader._index_sampler,  # pulled as reached when it has a len()
                              lambda k, b: BatchTask(k, 0, b, size=_size(b), seed=base_seed + k))
        timeout = loader.timeout if loader.timeout and loader.timeout > 0 else DEFAULT_TIMEOUT_S
        self._stream = BatchStream([lane], tasks, window=loader.window, timeout_s=timeout, hooks=loader._stats)
        self._pin = loader.pin_memory and torch.cuda.is_available()
        self._pin_device = loader.pin_memory_device or None
        loader._streams[:] = [st for st in loader._streams if not st.closed] + [self._stream]

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._stream)

    def __next__(self) -> Any:
        try:
            batch = next(self._stream)
        except BaseException:
            if self._stream.closed:
                self._release()  # the pass is over: its own (non-persistent) actors go
            raise
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
