"""The actor pools of the drop-in ``hybridload.DataLoader``: one for a map-style dataset (a
lane: batches of indices, run by `DatasetWorker`)
and one for an ``IterableDataset`` (actors holding torch workers' iterators,
`IterableDatasetWorker`, read by
`IterablePass`).

Both ship ``(dataset, collate_fn, worker_init_fn)`` as one object, so a ``worker_init_fn``
bound to the dataset arrives bound to the very dataset the actor reads. An exception of
``worker_init_fn`` in a map-style actor stops the pool's start with
`InitFailed` carrying the user's exception.
A pass that would wait for CPUs its own process's other pools hold runs in-process instead
(`no_cpu_for_another_pool`, `in_process_pass`).
"""

from __future__ import annotations

import warnings

from hybridload.lanes.base import BatchTask
from hybridload.lanes.ray.actor_pool import ActorPool
from hybridload.lanes.ray.dataset_worker import DatasetWorker, UserFailure
from hybridload.lanes.ray.iterable_pass import IterablePass
from hybridload.lanes.ray.iterable_worker import IterableDatasetWorker


class DatasetLane(ActorPool):
    """Batches of a map-style dataset's indices on Ray actors."""

    name = "ray-dataset"

    def __init__(self, bundle: tuple, *, auto_collation: bool, asked: int, **pool):
        super().__init__(DatasetWorker, (bundle, auto_collation, asked), pass_worker_index=True,
                         fit_request=True, **pool)

    def call(self, actor, task: BatchTask):
        return actor.run.remote(task.indices, task.seed, task.seq)  # the pass's seed, on its task

    def failure(self, task: BatchTask, exc: BaseException):
        """A result Ray could not send back is the batch's outcome, as the user's errors are."""
        return UserFailure.unsendable(exc, task.seq) or super().failure(task, exc)


class IterableDatasetActors(ActorPool):
    """Actors holding an ``IterableDataset``'s worker iterators (ids spread over the actors);
    `start_pass` gives a pass over them in torch's order. Not a lane of the dispatcher:
    an iterator has no batches to hand to another actor."""

    name = "ray-iterable-dataset"

    def __init__(self, bundle: tuple, *, auto_collation: bool, batch_size, drop_last: bool, asked: int,
                 **pool):
        super().__init__(IterableDatasetWorker, (bundle, auto_collation, batch_size, drop_last, asked),
                         pass_worker_index=True, fit_request=True, **pool)
        import ray
        handles = [m.handle for m in self.members()]
        try:
            ids = ray.get([h.ids.remote() for h in handles], timeout=60)
        except BaseException:
            self.close()
            raise
        self._by_id = {w: h for h, hosted in zip(handles, ids) for w in hosted}

    def call(self, actor, task: BatchTask):
        raise TypeError("an IterableDataset's actors take no indexed batches")

    def start_pass(self, base_seed: int, *, prefetch: int, timeout_s: float, length=None) -> IterablePass:
        return IterablePass(self._by_id, base_seed, prefetch=prefetch, timeout_s=timeout_s, length=length)


def no_cpu_for_another_pool(pools_here: list) -> bool:
    """Whether a new pass must not start actors: this process already holds actor pools
    (``pools_here``: a training loader beside a validation one, two live iterators) and the
    cluster has no CPU they leave free, i.e. the new actors would wait for CPUs this very
    process holds. Counts the pools' actors starting or ready (Ray's free count lags them)."""
    if not pools_here:
        return False
    import ray
    if not ray.is_initialized():
        return False
    held = sum(len(p.actors) for p in pools_here)
    free = min(ray.available_resources().get("CPU", 0), ray.cluster_resources().get("CPU", 0) - held)
    return free < 1


#: why a pass runs in this process although it asked for actors (`in_process_pass`)
OVERSUBSCRIBED = ("no free CPU for this pass's Ray actors while another pass of this process holds them (a "
                  "training and a validation loader, two live iterators); this pass runs in this process as "
                  "torch's num_workers=0 (give the cluster more CPUs, or lower num_workers, to run it on actors)")


def in_process_pass(loader, why: str | None = None):
    """torch's single-process iterator over ``loader`` (a drop-in DataLoader); with ``why``, one
    warning saying why a pass that asked for actors runs in this process instead."""
    if why is not None:
        warnings.warn(f"hybridload.DataLoader: {why}", stacklevel=3)
    import torch.utils.data as tud
    saved = loader.num_workers, loader.timeout
    loader.num_workers, loader.timeout = 0, 0  # torch's single-process iterator asserts both are 0
    try:
        return tud.dataloader._SingleProcessDataLoaderIter(loader)
    finally:
        loader.num_workers, loader.timeout = saved
