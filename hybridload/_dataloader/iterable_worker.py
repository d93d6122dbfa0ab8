"""The drop-in's actor for an ``IterableDataset``: torch's iterable worker loop, each hosted worker
id an iterator over its own copy, seeded and set up as torch's worker (a DataPipe's shuffle seeded
alike in every worker, its ``sharding_filter`` given this worker's shard), random states kept apart
(docs/guide/dropin.md)."""

from __future__ import annotations

import random
from typing import Any
import sys

import numpy as np
import torch
from torch.utils.data import IterDataPipe, graph_settings

from hybridload._compat import torch_iterable_fetcher, torch_worker_numpy_seed
from hybridload._dataloader.worker import UserFailure, set_worker_info, shippable
from hybridload.lanes._ray import PoolWorker


class End:
    """An id's data is exhausted for this pass (torch's ``_IterableDatasetStopIteration``)."""

    def __init__(self, worker_id: int):
        self.worker_id = worker_id


class _Hosted:
    """One torch worker: its dataset copy, its fetcher, its random state, its pending init error."""

    def __init__(self, worker_id: int, bundle):
        self.id = worker_id
        self.dataset, self.collate_fn, self.init_fn = bundle
        self.fetcher: Any = None
        self.failure: UserFailure | None = None
        self.started = False
        self.rng: tuple[Any, Any, torch.Tensor] | None = None
        self.batches = 0

    def swap_in(self, num_workers: int, base_seed: int):
        set_worker_info(self.id, num_workers, base_seed + self.id, self.dataset)
        if self.rng is not None:
            random.setstate(self.rng[0])
            np.random.set_state(self.rng[1])
            torch.set_rng_state(self.rng[2])

    def swap_out(self):
        self.rng = (random.getstate(), np.random.get_state(), torch.get_rng_state())


class IterableDatasetWorker(PoolWorker):
    """The actor. ``bundle`` as `DatasetWorker`'s; ``asked`` the ``num_workers`` given (0: one id
    per actor); ``ranks`` the trainer's ``(rank, world_size)``, for a DataPipe's shards."""

    def __init__(
        self,
        bundle,
        auto_collation: bool,
        batch_size,
        drop_last: bool,
        asked: int = 0,
        ranks: tuple[int, int] = (0, 1),
        index: int = 0,
        size: int = 1,
    ):
        super().__init__()
        from ray import cloudpickle  # in the actor: Ray is there (never at hybridload's import)

        self.auto, self.drop_last = auto_collation, drop_last
        self.index = [None] * batch_size if auto_collation else None
        self.num_workers = asked or size
        ids = range(index, self.num_workers, size)
        self.hosted = {
            i: _Hosted(i, bundle if k == 0 else cloudpickle.loads(cloudpickle.dumps(bundle))) for k, i in enumerate(ids)
        }
        self.base_seed = 0
        self.rank, self.world_size = ranks

    def ids(self) -> list[int]:
        """The DataLoader worker ids this actor runs."""
        return sorted(self.hosted)

    def begin(self, base_seed: int, shared_seed: int | None = None) -> None:
        """A pass starts: the first seeds, inits and iterates each id as a new torch worker; a later
        one (persistent workers) only iterates again, as torch's ``_ResumeIteration``;
        ``shared_seed``: a DataPipe's seed for this pass."""
        for w in self.hosted.values():
            if not w.started:
                w.started, self.base_seed = True, base_seed
                seed = base_seed + w.id
                random.seed(seed)
                torch.manual_seed(seed)
                np.random.seed(torch_worker_numpy_seed(base_seed, w.id))
                self._seed_datapipe(w, shared_seed)
                w.swap_in(self.num_workers, self.base_seed)
                if isinstance(w.dataset, IterDataPipe):  # torch's _sharding_worker_init_fn, before the user's
                    graph_settings.apply_sharding(
                        w.dataset, self.num_workers * self.world_size, w.id * self.world_size + self.rank
                    )
                w.failure = self._start(w, init=True)
            else:
                self._seed_datapipe(w, shared_seed)
                w.swap_in(self.num_workers, self.base_seed)
                w.batches = 0
                w.failure = w.failure or self._start(w, init=False)
            w.swap_out()

    @staticmethod
    def _seed_datapipe(w: _Hosted, shared_seed: int | None) -> None:
        """A DataPipe's random operations seeded alike in every worker, as torch's worker does."""
        if isinstance(w.dataset, IterDataPipe) and shared_seed is not None:
            w.dataset = graph_settings.apply_random_seed(w.dataset, torch.Generator().manual_seed(shared_seed))

    def _start(self, w: _Hosted, init: bool) -> UserFailure | None:
        w.fetcher = None
        try:
            if init and w.init_fn is not None:
                w.init_fn(w.id)
            w.fetcher = torch_iterable_fetcher(w.dataset, self.auto, w.collate_fn, self.drop_last)
        except Exception:
            what = "worker_init_fn or iter(dataset)" if init else "iter(dataset)"
            return UserFailure(sys.exc_info(), f"in DataLoader worker {w.id} (a Ray actor), in {what}")
        return None

    def next_batch(self, worker_id: int):
        """The id's next batch, `End`, or the user's exception as a value."""
        w = self.hosted[worker_id]
        if w.failure is not None:
            failure, w.failure = w.failure, None
            return failure
        if w.fetcher is None:
            return End(worker_id)
        w.swap_in(self.num_workers, self.base_seed)
        try:
            return shippable(w.fetcher.fetch(self.index))
        except StopIteration:
            w.fetcher = None
            return End(worker_id)
        except Exception:  # the user's code: this batch's outcome; the id goes on, as in torch
            return UserFailure(sys.exc_info(), f"in DataLoader worker {w.id} (a Ray actor), its batch {w.batches}")
        finally:
            w.batches += 1
            w.swap_out()
