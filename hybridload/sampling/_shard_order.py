"""The shard-aware order (as WebDataset and Mosaic streaming): shards permuted, cut into blocks of
``buffer_shards``, each block's samples shuffled together, so a worker meets few shards at a time;
ranks take contiguous spans, since a strided split would make every rank read every shard (the rule
and its trade: docs/guide/sources.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybridload._keyed import keyed_generator
from hybridload.sampling.sharding import pad_order, samples_per_rank

_TAG = 0x5A4D  # keeps this order's random stream apart from other users of (seed, epoch)


def _rng(seed: int, epoch: int) -> np.random.Generator:
    return keyed_generator(_TAG, int(seed) % 2**64, int(epoch) % 2**64)


def shard_block_order(shard_sizes, *, seed: int, epoch: int, buffer_shards: int, shuffle: bool = True) -> np.ndarray:
    """The whole dataset's order for an epoch; samples are numbered shard after shard."""
    sizes = np.asarray(shard_sizes, dtype=np.int64)
    n = int(sizes.sum())
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    rng = _rng(seed, epoch)
    shards = rng.permutation(len(sizes))
    blocks = []
    for b in range(0, len(shards), buffer_shards):
        members = [np.arange(starts[s], starts[s] + sizes[s], dtype=np.int64) for s in shards[b : b + buffer_shards]]
        blocks.append(rng.permutation(np.concatenate(members)))
    return np.concatenate(blocks) if blocks else np.empty(0, dtype=np.int64)


def contiguous_rank_split(order: np.ndarray, *, world_size: int, rank: int, drop_last: bool) -> np.ndarray:
    """Rank ``rank``'s contiguous span of ``order``, padded or trimmed as DistributedSampler."""
    per_rank = samples_per_rank(len(order), world_size, drop_last)
    padded = pad_order(order, per_rank * world_size)
    return padded[rank * per_rank : (rank + 1) * per_rank]


@dataclass(frozen=True)
class ShardOrder:
    """The shard-aware order of a sharded source, as ``Source.sample_order()`` returns it.

    Args:
        shard_sizes: samples per shard, in the source's shard order.
        buffer_shards: shards whose samples are shuffled together (the block size); more
            mixes better and needs more shards held at once by each worker.
    """

    shard_sizes: tuple[int, ...]
    buffer_shards: int = 4

    def __post_init__(self):
        if isinstance(self.buffer_shards, bool) or not isinstance(self.buffer_shards, int) or self.buffer_shards < 1:
            raise ValueError(
                f"ShardOrder: buffer_shards must be an int >= 1, got {self.buffer_shards!r}; write e.g. buffer_shards=4"
            )
        if any(int(s) < 0 for s in self.shard_sizes):
            raise ValueError("ShardOrder: shard_sizes must be counts >= 0")

    def rank_indices(
        self, n: int, *, seed: int, epoch: int, world_size: int, rank: int, shuffle: bool, drop_last: bool
    ) -> np.ndarray:
        """This rank's sample indices for an epoch, in order."""
        if n != sum(self.shard_sizes):
            raise ValueError(
                f"ShardOrder: the dataset has {n} samples but the shards hold {sum(self.shard_sizes)}; "
                "build the order from the same source"
            )
        order = shard_block_order(
            self.shard_sizes, seed=seed, epoch=epoch, buffer_shards=self.buffer_shards, shuffle=shuffle
        )
        return contiguous_rank_split(order, world_size=world_size, rank=rank, drop_last=drop_last)
