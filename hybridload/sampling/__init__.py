"""Sampling: which sample indices each rank sees, in which order, batch by batch, as pure functions
and plain data (the orders and their guarantees: docs/guide/guarantees.md).

Modules: ``sharding`` (DistributedSampler's order, per-rank batches), ``shard_order`` (the
shard-aware order for tar shards), ``keyed_order`` and ``keyed_shard_order`` (the same orders batch
by batch, ``order="keyed"``), ``mix_order`` (a mixture's quotas and keyed interleaving), ``uneven``
(``even_batches=False``), ``weighted_order`` (per-sample weights' keyed draws), ``epochs`` (endless
passes), ``resume`` (what is left of an epoch, for any number of ranks), ``pass_state``
(`PassState`, the one owner of where a pass is and its saved state; each pass a `Pass` handle) and
``sampler`` (`DistributedBatchSampler`)."""

from hybridload.sampling.keyed_order import KeyedOrder
from hybridload.sampling.keyed_shard_order import KeyedShardOrder
from hybridload.sampling.sampler import DistributedBatchSampler, num_batches, rank_batches, resolve_rank

__all__ = ["DistributedBatchSampler", "KeyedOrder", "KeyedShardOrder", "num_batches", "rank_batches", "resolve_rank"]
