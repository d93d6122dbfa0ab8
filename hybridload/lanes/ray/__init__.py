"""The Ray lane: CPU kernels on an elastic pool of Ray actors, preferably on other nodes.

``lane`` (RayLane and its actor), ``actor_pool`` (the pool, shared with the drop-in
``hybridload.DataLoader``'s pools), ``spawner`` (making its actors, named and pinned to
their nodes), ``pool_config`` (its settings, `PoolConfig`), ``worker`` (every actor's common part), ``members`` (each
actor's state), ``startup`` (the pool works from its first ready actor), ``deaths`` (a worker
process lost with a batch: handed on until `blamed`, then `WorkerLost`), ``elastic`` (the keeper: one thread that owns the member table, applies
what the other threads post to it, replaces lost actors, uses nodes that join and holds tasks
while no actor is ready), ``capacity`` (what
the pool does while the cluster gives its rank no actor), ``pool_stats`` and ``callbacks``
(Ray's callback thread never calls Ray: docs/decisions/ray-callbacks-never-call-ray.md). Ray itself is imported lazily, never at
``import hybridload``.
"""

from hybridload.lanes.ray.actor_pool import ActorPool
from hybridload.lanes.ray.lane import RayLane
from hybridload.lanes.ray.pool_config import PoolConfig, start_timeout_seconds
from hybridload.lanes.ray.worker import PoolWorker

__all__ = ["ActorPool", "PoolConfig", "PoolWorker", "RayLane", "start_timeout_seconds"]
