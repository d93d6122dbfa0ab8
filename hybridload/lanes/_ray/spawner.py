"""A pool's actors: its init args put in the object store once for all of them (unimportable user
code shipped by value), each actor named ``hybridload-<pid>-r<rank>-<tag>-<k>`` for ``ray list
actors`` and pinned to its node with one CPU."""

from __future__ import annotations

import os
import uuid
from typing import Any, Callable

from hybridload.raycluster._shipping import ship_unimportable

#: actors are named ``hybridload-<pid>-r<rank>-<tag>-<k>`` (visible in ``ray list actors``)
ACTOR_NAME_PREFIX = "hybridload-"


class ActorFactory:
    """Starts ``worker_cls(*init_args)`` actors of ``rank`` on given nodes; with
    ``pass_worker_index`` each also gets its index and the pool's size."""

    def __init__(self, ray: Any, worker_cls: type, init_args: tuple, rank: int, size: int, pass_worker_index: bool):
        self.size = size
        self.pass_worker_index = pass_worker_index
        self._remote_cls = ray.remote(worker_cls)
        ship_unimportable(init_args)  # user code the workers cannot import travels by value
        self._init_refs = tuple(ray.put(a) for a in init_args)  # sent once, shared by every actor
        self.tag = f"{ACTOR_NAME_PREFIX}{os.getpid()}-r{rank}-{uuid.uuid4().hex[:8]}"

    def creator(self, node_id: str) -> Callable[[int, int], Any]:
        """What ``Members.add`` calls with an actor's key and index to start it on ``node_id``."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        def create(key: int, index: int):
            return self._remote_cls.options(
                num_cpus=1,
                max_concurrency=1,
                name=f"{self.tag}-{key}",
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(*self._init_refs, *((index, max(self.size, index + 1)) if self.pass_worker_index else ()))

        return create
