"""The Ray lane: the CPU kernels on an elastic pool of Ray actors, preferably on other nodes (its
life: docs/guide/cluster-changes.md). Ray is imported lazily, never at ``import hybridload``.

Modules: ``lane`` (`RayLane` and its actor), ``actor_pool`` (the pool, shared with the drop-in's
pools), ``spawner`` (its actors, named and pinned to their nodes), ``pool_config`` (`PoolConfig`),
``worker`` (every actor's common part), ``members`` (the actors' table and `LIFECYCLE`), ``startup``
(the pool works from its first ready actor), ``deaths`` (a worker lost with a batch: handed on until
`blamed`), ``elastic`` (the keeper: the one thread that owns the table), ``capacity`` (the pool
while the cluster gives its rank no actor), ``pool_stats`` and ``callbacks`` (Ray's callback thread
never calls Ray)."""

from hybridload.lanes._ray.actor_pool import ActorPool
from hybridload.lanes._ray.lane import RayLane
from hybridload.lanes._ray.pool_config import PoolConfig, start_timeout_seconds
from hybridload.lanes._ray.worker import PoolWorker

__all__ = ["ActorPool", "PoolConfig", "PoolWorker", "RayLane", "start_timeout_seconds"]
