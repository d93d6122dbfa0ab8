"""Sampling: which sample indices each rank sees, in which order, batch by batch.

Pure functions and plain data: ``sharding`` (DistributedSampler's order, per-rank batches),
``shard_order`` (shard-local orders for tar shards) and ``epochs`` (endless passes).
"""

from hybridload.sampling.sharding import DistributedBatchSampler, num_batches, rank_batches, resolve_rank

__all__ = ["DistributedBatchSampler", "num_batches", "rank_batches", "resolve_rank"]
