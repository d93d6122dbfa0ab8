"""What every actor of an `ActorPool` does alike."""

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
