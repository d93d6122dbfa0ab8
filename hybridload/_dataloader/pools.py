"""The drop-in's actor pools: one for a map-style dataset (a lane of `DatasetWorker` s), one for an
``IterableDataset`` (`IterableDatasetWorker` s read by `IterablePass`); both ship ``(dataset,
collate_fn, worker_init_fn)`` as one object, so a ``worker_init_fn`` bound to the dataset arrives
bound to the very dataset the actor reads."""

from __future__ import annotations

import time

from hybridload._dataloader.iterable_pass import IterablePass
from hybridload._dataloader.iterable_worker import IterableDatasetWorker
from hybridload._dataloader.worker import DatasetWorker, UserFailure
from hybridload.lanes import BatchTask
from hybridload.lanes._ray import ActorPool, PoolConfig, start_timeout_seconds


class DatasetLane(ActorPool):
    """Batches of a map-style dataset's indices on Ray actors."""

    name = "ray-dataset"
    pass_worker_index = True  # each actor knows its torch worker id
    fit_request = True  # more workers than CPU slots: as many actors as fit, as torch runs more workers than cores
    crashes_to_fail = 1  # a batch that crashed its worker (SIGSEGV, ...) fails the pass, as torch's first dead worker

    def __init__(self, bundle: tuple, pool: PoolConfig, *, auto_collation: bool, asked: int, base_seed: int = 0):
        self._asked = asked
        super().__init__(DatasetWorker, (bundle, auto_collation, asked, base_seed), pool)
        self._await_started(start_timeout_seconds(pool.ready_timeout_s))

    def _await_started(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` until every actor started with the pool is ready or failed:
        batches are dealt in turn, so an actor's start belongs to the pool's start, not to a batch's
        ``timeout``, as a torch worker starts before its first batch."""
        deadline = time.monotonic() + timeout_s
        while self.parallelism < len(self.actors) and time.monotonic() < deadline:
            time.sleep(0.02)

    def call(self, actor, task: BatchTask):
        return actor.run.remote(task.indices, task.seed, task.seq)  # the pass's seed, on its task

    def deal(self, seq: int) -> int:
        """torch's turn: batch ``seq`` to worker ``seq % num_workers``, i.e. to the actor hosting that id."""
        size = self._factory.size
        return (seq % (self._asked or size)) % size

    def failure(self, task: BatchTask, exc: BaseException):
        """A result Ray could not send back is the batch's outcome, as the user's errors are."""
        return UserFailure.unsendable(exc, task.seq) or super().failure(task, exc)


class IterableDatasetActors(ActorPool):
    """Actors holding an ``IterableDataset``'s worker iterators; `start_pass` gives a pass in
    torch's order. Not a dispatcher lane: an iterator has no batch another actor could take."""

    name = "ray-iterable-dataset"
    pass_worker_index = True
    fit_request = True

    def __init__(
        self,
        bundle: tuple,
        pool: PoolConfig,
        *,
        auto_collation: bool,
        batch_size,
        drop_last: bool,
        asked: int,
        ranks: tuple[int, int] = (0, 1),
    ):
        init = (bundle, auto_collation, batch_size, drop_last, asked, ranks)
        super().__init__(IterableDatasetWorker, init, pool)
        handles = [m.handle for m in self.members()]
        try:
            ids = hosted_ids(handles, start_timeout_seconds(pool.ready_timeout_s))
        except BaseException:
            self.close()
            raise
        self._by_id = {w: h for h, hosted in zip(handles, ids) for w in hosted}

    def call(self, actor, task: BatchTask):
        raise TypeError("an IterableDataset's actors take no indexed batches")

    def start_pass(
        self, base_seed: int, *, prefetch: int, timeout_s: float, length=None, shared_seed: int | None = None
    ) -> IterablePass:
        """A pass in torch's order; ``shared_seed`` seeds a DataPipe's shuffle alike in every worker."""
        return IterablePass(
            self._by_id, base_seed, prefetch=prefetch, timeout_s=timeout_s, length=length, shared_seed=shared_seed
        )


def hosted_ids(handles: list, timeout_s: float) -> list:
    """The worker ids each actor hosts, once all started within ``timeout_s``, else a TimeoutError
    that says so."""
    import ray

    try:
        return ray.get([h.ids.remote() for h in handles], timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise TimeoutError(
            f"hybridload.DataLoader: not every Ray actor of this IterableDataset pass started within "
            f"{timeout_s:g} s; the cluster may lack free CPUs (check `ray status`), or its machines are "
            "loaded: allow more with HYBRIDLOAD_ACTOR_START_TIMEOUT_S (seconds)"
        ) from None
