"""The keyed epoch order (``order="keyed"``): position ``p`` holds ``P(p)``, a keyed bijection of
``[0, n)``, so a rank's batch is computed on its own in O(batch) time and O(1) memory; ranks,
padding and dropping are DistributedSampler's (the permutation, and why it is written here:
docs/guide/guarantees.md, "The epoch order")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from hybridload._keyed import derive_key, mix64, mix64_array
from hybridload.sampling.sharding import num_batches, samples_per_rank

ROUNDS = 6


class KeyedPermutation:
    """A keyed bijection of ``[0, n)``: ``perm(x)`` and ``perm.inverse(y)`` on int arrays.

    Args:
        n: the size of the domain (>= 0).
        key: a 64-bit key (`derive_key`).
    """

    def __init__(self, n: int, key: int):
        if n < 0:
            raise ValueError(f"KeyedPermutation: n must be >= 0, got {n}")
        self.n = int(n)
        self.bits = max(2, (self.n - 1).bit_length())  # the network covers [0, 2**bits), fewer than 2 n values
        a, b = self.bits // 2, self.bits - self.bits // 2
        # round r splits its input into (left, right) of (a, b) bits, then (b, a), ... (unbalanced Feistel)
        self._widths = [
            (np.uint64(a), np.uint64(b)) if r % 2 == 0 else (np.uint64(b), np.uint64(a)) for r in range(ROUNDS)
        ]
        self._masks = {w: np.uint64((1 << int(w)) - 1) for w in (np.uint64(a), np.uint64(b))}
        self._keys = [np.uint64(mix64(int(key) + r * 0x9E3779B97F4A7C15)) for r in range(ROUNDS)]

    def _rounds(self, x: np.ndarray, inverse: bool) -> np.ndarray:
        """One pass of the unbalanced Feistel network, round r mapping (left, right) to (right, left
        ^ F(right)); the inverse undoes the rounds last first."""
        if not inverse:
            for k, (wl, wr) in zip(self._keys, self._widths):
                right = x & self._masks[wr]
                f = mix64_array(right ^ k)
                f &= self._masks[wl]
                f ^= x >> wr
                x = (right << wl) | f
        else:
            for k, (wl, wr) in zip(reversed(self._keys), reversed(self._widths)):
                right = x >> wl  # the forward round's right half, now on the left
                f = mix64_array(right ^ k)
                f &= self._masks[wl]
                f ^= x & self._masks[wl]
                x = (f << wr) | right
        return x

    def _walk(self, values, inverse: bool) -> np.ndarray:
        x = np.asarray(values, dtype=np.int64)
        if x.size and (x.min() < 0 or x.max() >= self.n):
            raise ValueError(f"KeyedPermutation: values must lie in [0, {self.n}), got {int(x.min())}..{int(x.max())}")
        out = self._rounds(x.astype(np.uint64), inverse)
        todo = np.flatnonzero(out >= np.uint64(self.n))
        while todo.size:  # cycle-walking: a value past n goes round again until it lands inside
            step = self._rounds(out[todo], inverse)
            out[todo] = step
            todo = todo[step >= np.uint64(self.n)]
        return out.astype(np.int64)

    def __call__(self, positions) -> np.ndarray:
        """The samples at ``positions`` (ints in [0, n))."""
        return self._walk(positions, inverse=False)

    def inverse(self, samples) -> np.ndarray:
        """The positions of ``samples``: ``perm.inverse(perm(x)) == x``."""
        return self._walk(samples, inverse=True)


class RankBatches(Sequence):
    """A rank's batches of one epoch, each an int64 array computed when asked, O(batch) time.

    Args:
        count: batches in the epoch.
        per_rank: samples this rank takes in the epoch.
        batch_size: samples per batch (the last may be short).
        lookup: this rank's sample positions ``j`` to dataset indices.
    """

    def __init__(self, count: int, per_rank: int, batch_size: int, lookup: Callable[[np.ndarray], np.ndarray]):
        self.num_batches, self.per_rank, self.batch_size, self._lookup = count, per_rank, batch_size, lookup

    def __len__(self) -> int:
        return self.num_batches

    def __getitem__(self, b):
        if isinstance(b, slice):
            return [self[k] for k in range(*b.indices(self.num_batches))]
        b = int(b) + (self.num_batches if int(b) < 0 else 0)
        if not 0 <= b < self.num_batches:
            raise IndexError(f"batch {b} out of range: this rank has {self.num_batches} batches in the epoch")
        stop = min((b + 1) * self.batch_size, self.per_rank)
        return self._lookup(np.arange(b * self.batch_size, stop, dtype=np.int64))


class KeyedOrder:
    """DistributedSampler's order and split with the keyed permutation in place of
    ``torch.randperm``: an ``order=`` for `DistributedBatchSampler`."""

    kind = "keyed"

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
        count = num_batches(n, batch_size=batch_size, world_size=world_size, drop_last=drop_last)
        per_rank = samples_per_rank(n, world_size, drop_last)
        perm = KeyedPermutation(n, derive_key(seed, epoch)) if shuffle else None

        def lookup(j: np.ndarray) -> np.ndarray:
            p = (rank + j * world_size) % max(n, 1)  # padding repeats the order from its start
            return perm(p) if perm is not None else p

        return RankBatches(count, per_rank, batch_size, lookup)

    def rank_indices(
        self, n: int, *, seed: int, epoch: int, world_size: int, rank: int, shuffle: bool, drop_last: bool
    ) -> np.ndarray:
        """This rank's whole epoch as one array (O(samples per rank): for tests and tools)."""
        return whole_rank(
            self, n, seed=seed, epoch=epoch, world_size=world_size, rank=rank, shuffle=shuffle, drop_last=drop_last
        )


def batch_indices(
    n: int,
    seed: int,
    epoch: int,
    world_size: int,
    rank: int,
    batch_size: int,
    b: int,
    drop_last: bool,
    shuffle: bool = True,
) -> np.ndarray:
    """Rank ``rank``'s batch ``b`` of the keyed order, computed on its own."""
    return KeyedOrder().rank_batches(
        n,
        batch_size=batch_size,
        seed=seed,
        epoch=epoch,
        world_size=world_size,
        rank=rank,
        shuffle=shuffle,
        drop_last=drop_last,
    )[b]


def contiguous_rank_batches(
    positions: Callable[..., np.ndarray],
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
    """Rank ``rank``'s batches as a contiguous span of the padded order, positions looked up by
    ``positions`` when asked."""
    count = num_batches(n, batch_size=batch_size, world_size=world_size, drop_last=drop_last)
    per_rank = samples_per_rank(n, world_size, drop_last)

    def lookup(j: np.ndarray) -> np.ndarray:
        return positions((rank * per_rank + j) % max(n, 1), seed=seed, epoch=epoch, shuffle=shuffle)

    return RankBatches(count, per_rank, batch_size, lookup)


def whole_rank(
    order: Any, n: int, *, seed: int, epoch: int, world_size: int, rank: int, shuffle: bool, drop_last: bool
) -> np.ndarray:
    """Rank ``rank``'s whole epoch of ``order`` as one array: its ``rank_batches`` as one batch."""
    batches = order.rank_batches(
        n,
        batch_size=max(1, samples_per_rank(n, world_size, drop_last)),
        seed=seed,
        epoch=epoch,
        world_size=world_size,
        rank=rank,
        shuffle=shuffle,
        drop_last=drop_last,
    )
    return batches[0] if len(batches) else np.empty(0, dtype=np.int64)
