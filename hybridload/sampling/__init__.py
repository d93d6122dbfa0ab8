"""Sampling: which sample indices each rank sees, in which order, batch by batch.

Pure functions and plain data: ``sharding`` (DistributedSampler's order, per-rank batches),
``shard_order`` (shard-local orders for tar shards), ``keyed_order`` and ``keyed_shard_order``
(the same orders computed batch by batch, ``order="keyed"``), ``mix_order`` (a mixture's quotas
and keyed interleaving), ``uneven`` (``even_batches=False``: each rank's share without padding,
for evaluation), ``weighted_order`` (per-sample weights' keyed draws), ``epochs`` (endless passes),
``resume`` (what is left of an epoch, for any number of ranks), ``pass_state`` (``PassState``:
where a pass is and its saved state, the one owner; each pass a ``Pass`` handle) and ``sampler``
(``DistributedBatchSampler``, the stateful iterable).
"""

from hybridload.sampling.keyed_order import KeyedOrder
from hybridload.sampling.keyed_shard_order import KeyedShardOrder
from hybridload.sampling.sampler import DistributedBatchSampler, num_batches, rank_batches, resolve_rank

__all__ = ["DistributedBatchSampler", "KeyedOrder", "KeyedShardOrder", "num_batches", "rank_batches", "resolve_rank"]
