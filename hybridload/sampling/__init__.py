"""Sampling: which sample indices each rank sees, in which order, batch by batch, as pure functions
and plain data (the orders and their guarantees: docs/guide/guarantees.md).

Modules: ``sharding`` (DistributedSampler's order, per-rank batches), ``_shard_order`` (the
shard-aware order for tar shards), ``_keyed_order`` and ``_keyed_shard_order`` (the same orders batch
by batch, ``order="keyed"``), ``_mix_order`` (a mixture's quotas and keyed interleaving), ``_uneven``
(``even_batches=False``), ``_weighted_order`` (per-sample weights' keyed draws), ``_epochs`` (endless
passes), ``_resume`` (what is left of an epoch, for any number of ranks), ``_pass_state``
(`PassState`, the one owner of where a pass is and its saved state; each pass a `Pass` handle) and
``_sampler`` (`DistributedBatchSampler`)."""

from hybridload.sampling._keyed_order import KeyedOrder
from hybridload.sampling._keyed_shard_order import KeyedShardOrder
from hybridload.sampling._resume import common_position
from hybridload.sampling._sampler import DistributedBatchSampler, num_batches, rank_batches, resolve_rank

__all__ = [
    "DistributedBatchSampler",
    "KeyedOrder",
    "KeyedShardOrder",
    "common_position",
    "num_batches",
    "rank_batches",
    "resolve_rank",
]
