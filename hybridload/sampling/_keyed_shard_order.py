"""The shard-aware order keyed (``order="keyed"``): the shards' permutation once per epoch
(O(shards)), each block's permutation, keyed by ``(seed, epoch, k)``, only when a batch reaches it;
another stream than the ``"randperm"`` shard-aware order, with its properties."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hybridload._keyed import derive_key
from hybridload.sampling._keyed_order import (
    KeyedOrder,
    KeyedPermutation,
    RankBatches,
    contiguous_rank_batches,
    whole_rank,
)
from hybridload.sampling._shard_order import ShardOrder

_SHARDS, _BLOCK = 1, 2  # key parts: the shards' permutation, a block's permutation


class KeyedShardOrder:
    """The keyed shard-aware order of a sharded source (an ``order=`` for the sampler).

    Args:
        shard_sizes: samples per shard, in the source's shard order.
        buffer_shards: shards per block.
    """

    kind = "keyed"

    def __init__(self, shard_sizes: Sequence[int] | np.ndarray, buffer_shards: int = 4):
        if isinstance(buffer_shards, bool) or not isinstance(buffer_shards, int) or buffer_shards < 1:
            raise ValueError(
                f"KeyedShardOrder: buffer_shards must be an int >= 1, got {buffer_shards!r}; write e.g. buffer_shards=4"
            )
        self.sizes = np.asarray(shard_sizes, dtype=np.int64).reshape(-1)
        if (self.sizes < 0).any():
            raise ValueError("KeyedShardOrder: shard_sizes must be counts >= 0")
        self.buffer_shards = buffer_shards
        self.n = int(self.sizes.sum())
        self._starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self._epoch: tuple[tuple[int, int], tuple] | None = (
            None  # ((seed, epoch), tables): the last epoch's tables, replaced as a whole
        )
        self._blocks: tuple = ()  # ((seed, epoch, block), permutation) of the last two blocks met

    def _tables(self, seed: int, epoch: int):
        """(shard at each slot of the epoch's shard order, where each slot's samples begin, where
        each block begins), O(shards)."""
        cached = self._epoch
        if cached is not None and cached[0] == (seed, epoch):
            return cached[1]
        shards = len(self.sizes)
        slot_shard = KeyedPermutation(shards, derive_key(seed, epoch, _SHARDS))(np.arange(shards, dtype=np.int64))
        slot_start = np.concatenate([[0], np.cumsum(self.sizes[slot_shard])]).astype(np.int64)
        block_start = slot_start[np.arange(0, shards + self.buffer_shards, self.buffer_shards).clip(max=shards)]
        tables = (slot_shard, slot_start, block_start)
        self._epoch = ((seed, epoch), tables)
        return tables

    def _block_perm(self, size: int, key: tuple) -> KeyedPermutation:
        """Block ``key``'s permutation; the last two are kept, as a batch meets one or two blocks."""
        held = self._blocks
        for k, perm in held:
            if k == key:
                return perm
        perm = KeyedPermutation(size, derive_key(key[0], key[1], _BLOCK, key[2]))
        self._blocks = (held + ((key, perm),))[-2:]
        return perm

    def shard_sequence(self, *, seed: int, epoch: int) -> np.ndarray:
        """The epoch's shard order (block ``k`` is its slots ``k * buffer_shards ...``)."""
        return self._tables(seed, epoch)[0]

    def positions(self, p: np.ndarray, *, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
        """The samples at positions ``p`` (in [0, n)) of the epoch's order."""
        p = np.asarray(p, dtype=np.int64)
        if not shuffle or p.size == 0:
            return p
        slot_shard, slot_start, block_start = self._tables(seed, epoch)
        block = np.searchsorted(block_start, p, side="right") - 1  # the last block starting at or before p
        inside = np.empty_like(p)
        for k in np.unique(block):  # a batch meets one or two blocks (more only when blocks are small)
            sel = block == k
            size = int(block_start[k + 1] - block_start[k])
            perm = self._block_perm(size, (seed, epoch, int(k)))
            inside[sel] = block_start[k] + perm(p[sel] - block_start[k])
        slot = np.searchsorted(slot_start, inside, side="right") - 1
        return self._starts[slot_shard[slot]] + (inside - slot_start[slot])

    def rank_batches(
        self,
        n: int,
        *,
        batch_size: int,
        seed: int,
        epoch: int,
        world_size: int,
        rank: int,
        shuffle: bool,
        drop_last: bool,
    ) -> RankBatches:
        """This rank's batches of an epoch: a contiguous span of the padded order (as
        `contiguous_rank_split`), each batch computed when asked."""
        if n != self.n:
            raise ValueError(
                f"KeyedShardOrder: the dataset has {n} samples but the shards hold {self.n}; "
                "build the order from the same source"
            )
        return contiguous_rank_batches(
            self.positions,
            n,
            batch_size=batch_size,
            seed=seed,
            epoch=epoch,
            world_size=world_size,
            rank=rank,
            shuffle=shuffle,
            drop_last=drop_last,
        )

    def rank_indices(
        self, n: int, *, seed: int, epoch: int, world_size: int, rank: int, shuffle: bool, drop_last: bool
    ) -> np.ndarray:
        """This rank's whole epoch as one array (O(samples per rank): for tests and tools)."""
        return whole_rank(
            self, n, seed=seed, epoch=epoch, world_size=world_size, rank=rank, shuffle=shuffle, drop_last=drop_last
        )


#: the values of the order setting: "randperm" (the epoch's order made whole at its start) and
#: "keyed"
ORDERS = ("randperm", "keyed")


def check_order(order, where: str) -> str:
    """The ``order`` setting, checked: one of `ORDERS`."""
    if order not in ORDERS:
        raise ValueError(
            f"{where}: order must be 'randperm' (torch's order, the default) or 'keyed' (computed "
            f"batch by batch, for very large datasets), got {order!r}"
        )
    return order


def keyed_order_for(source_order):
    """The keyed counterpart of a source's ``sample_order()``: None becomes `KeyedOrder`, a
    `ShardOrder` its keyed form."""
    if source_order is None:
        return KeyedOrder()
    if isinstance(source_order, ShardOrder):
        return KeyedShardOrder(source_order.shard_sizes, source_order.buffer_shards)
    if getattr(source_order, "kind", None) == "keyed":
        return source_order
    raise ValueError(
        f"order='keyed' has no keyed form of the source's order {type(source_order).__name__}; use order='randperm'"
    )


def sampler_order(source_order, order: str, where: str):
    """The sampler's ``order=`` for a source's ``sample_order()`` under ``order``; a source whose
    own order is keyed (a `Mix`) needs "keyed"."""
    if order == "keyed":
        return keyed_order_for(source_order)
    if getattr(source_order, "kind", None) == "keyed":
        raise ValueError(
            f"{where}: the source's order ({type(source_order).__name__}) is computed batch by batch, "
            "keyed by (seed, epoch, position); pass order='keyed'"
        )
    return source_order


def order_kind(order) -> str:
    """What a sampler's ``order=`` object is called in a checkpoint ("keyed" or "randperm")."""
    return getattr(order, "kind", "randperm")
