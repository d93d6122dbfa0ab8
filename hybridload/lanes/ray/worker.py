"""What every actor of an :class:`~hybridload.lanes.ray.actor_pool.ActorPool` does alike."""

from __future__ import annotations

import torch


class PoolWorker:
    """The actor's common part: torch on one thread (the actor holds one CPU) and ``ready()``,
    which the pool awaits and which names the node the actor landed on. Subclasses add ``run``."""

    def __init__(self) -> None:
        torch.set_num_threads(1)

    def ready(self) -> str:
        import ray
        return ray.get_runtime_context().get_node_id()


def set_worker_info(worker_id: int, num_workers: int, seed: int, dataset) -> None:
    """Make ``torch.utils.data.get_worker_info()`` inside the actor return these, as in a torch worker.

    Args:
        worker_id: the worker's id.
        num_workers: how many workers there are.
        seed: the seed of the batch at hand.
        dataset: the dataset the worker reads.
    """
    from torch.utils.data._utils import worker as torch_worker
    torch_worker._worker_info = torch_worker.WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed,
                                                        dataset=dataset)
