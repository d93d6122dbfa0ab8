"""The Ray lane: CPU kernels on an elastic pool of Ray actors, preferably on other nodes.

``lane`` (RayLane and its actor), ``actor_pool`` (the pool), ``members`` (each actor's
state), ``elastic`` (replacing lost actors, using nodes that join), ``capacity`` (what the pool does
while the cluster gives its rank no actor), ``pool_stats`` and ``callbacks`` (Ray's callback thread
never calls Ray); for the drop-in
``hybridload.DataLoader``: ``dataset_lane`` (its pools), ``dataset_worker`` (a map-style
dataset's actor, user errors as values), ``iterable_worker`` and ``iterable_pass`` (an
``IterableDataset`` on actors, in torch's order).
Ray itself is imported lazily, never at ``import hybridload``.
"""

from hybridload.lanes.ray.lane import RayLane

__all__ = ["RayLane"]
