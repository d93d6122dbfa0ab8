"""Per-sample weights (`Weighted`) with ``WeightedRandomSampler``'s semantics, keyed: draw ``p`` of
an epoch is a pure function of (seed, epoch, p), a binary search of the cumulative weights for a
splitmix64 uniform, so a batch is computed on its own and a resume at any world size continues the
same draws (docs/guide/mixtures.md)."""

from __future__ import annotations

import numbers
import zlib
from typing import Any, Callable

import numpy as np

from hybridload._keyed import M64, derive_key, mix64_array
from hybridload.sampling._keyed_order import RankBatches
from hybridload.sampling.sharding import num_batches, samples_per_rank

_WEIGHTED = 0x776569676874  # "weight": these draws' keys apart from the orders'


def check_weights(weights: Any, n: int, where: str) -> np.ndarray:
    """One non-negative, finite weight per sample, not all zero, as float64; else a ValueError
    saying what to pass."""
    try:
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: weights must be numbers, one per sample, got {type(weights).__name__}") from None
    if len(w) != n:
        raise ValueError(f"{where}: {len(w)} weights for {n} samples; pass one weight per sample of the source")
    _check_values(w, 0, where)
    if not w.sum() > 0:
        raise ValueError(f"{where}: every weight is 0; give at least one sample a weight > 0")
    return w


def _check_values(w: np.ndarray, first: int, where: str) -> None:
    """Every weight of ``w`` (samples ``first, first + 1, ...``) finite and >= 0."""
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if bad.size:
        raise ValueError(
            f"{where}: sample {first + int(bad[0])}'s weight is {float(w[bad[0]])}; "
            "weights must be finite and >= 0 (0: never drawn)"
        )


def check_num_samples(num_samples: Any, default: int, where: str) -> int:
    """Draws per epoch: an int >= 1 (``default`` when None); else a ValueError naming ``num_samples``."""
    draws = default if num_samples is None else num_samples
    if isinstance(draws, bool) or not isinstance(draws, numbers.Integral) or draws < 1:
        raise ValueError(f"{where}: num_samples must be an int >= 1 (draws per epoch), got {num_samples!r}")
    return int(draws)


class CumulativeWeights:
    """The weights' cumulative sum held whole (one float64 per sample).

    Args:
        weights: the checked weights (`check_weights`).
    """

    def __init__(self, weights: np.ndarray):
        self.cdf = np.cumsum(weights, dtype=np.float64)  # add.accumulate: sequential, as `BlockedWeights` sums
        self.n, self.total = len(weights), float(self.cdf[-1])
        self.crc = zlib.crc32(np.ascontiguousarray(weights, dtype=np.float64).tobytes())

    def locate(self, x: np.ndarray) -> np.ndarray:
        """The samples whose slot of the cumulative sum holds each ``x`` (``0 <= x <= total``)."""
        return np.minimum(np.searchsorted(self.cdf, x, side="right"), self.n - 1).astype(np.int64)


class BlockedWeights:
    """Weights given as ``fn(indices) -> weights`` for sources too large to hold one per sample: the
    cumulative sum kept at every ``block``-th sample (7.8 MB at 10^9) and a drawn block summed
    again, the very floats `CumulativeWeights` holds, so the draws are the same. ``fn`` must be
    pure: a block summing to another total when drawn is a ValueError naming it.

    Args:
        fn: the weights of an int64 array of indices, one finite weight >= 0 each.
        n: the samples.
        where: the name errors begin with.
        block: samples per block.
        chunk: indices per call at construction (a multiple of ``block``).
    """

    def __init__(self, fn: Callable[[np.ndarray], Any], n: int, where: str, *, block: int = 1024, chunk: int = 1 << 20):
        self.fn, self.n, self.where, self.block = fn, int(n), where, int(block)
        chunk = max(self.block, chunk // self.block * self.block)
        ends, crc, carry = [], 0, 0.0
        for first in range(0, self.n, chunk):
            w = self._weights(np.arange(first, min(first + chunk, self.n), dtype=np.int64))
            _check_values(w, first, where)
            sums = np.cumsum(np.concatenate(([carry], w)))[1:]
            ends.append(sums[self.block - 1 :: self.block].copy())  # a copy: a view would hold the whole chunk
            if len(w) % self.block:
                ends.append(sums[-1:].copy())
            carry, crc = float(sums[-1]), zlib.crc32(w.tobytes(), crc)
        self.ends = np.concatenate(ends) if ends else np.zeros(0)
        self.total, self.crc = (float(self.ends[-1]) if len(self.ends) else 0.0), crc
        if not self.total > 0:
            raise ValueError(f"{where}: every weight is 0; give at least one sample a weight > 0")

    def _weights(self, idx: np.ndarray) -> np.ndarray:
        try:
            w = np.asarray(self.fn(idx), dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"{self.where}: the callable's weights for indices {int(idx[0])}..{int(idx[-1])} are not "
                f"numbers ({exc}); return one float per index"
            ) from None
        if len(w) != len(idx):
            raise ValueError(
                f"{self.where}: the callable returned {len(w)} weights for {len(idx)} indices; "
                "return one weight per index, in the order given"
            )
        return w

    def locate(self, x: np.ndarray) -> np.ndarray:
        """The samples whose slot of the cumulative sum holds each ``x``: the block by its end, then
        its own sums."""
        x = np.asarray(x, dtype=np.float64)
        b = np.searchsorted(self.ends, x, side="right")
        out = np.full(len(x), self.n - 1, dtype=np.int64)
        inside = b < len(self.ends)
        blocks, which = np.unique(b[inside], return_inverse=True)
        if not len(blocks):
            return out
        idx = (blocks[:, None] * self.block + np.arange(self.block)).reshape(-1)
        real = idx < self.n
        w = np.zeros(len(idx))
        w[real] = self._weights(idx[real])
        starts = np.where(blocks > 0, self.ends[np.maximum(blocks - 1, 0)], 0.0)
        sums = np.cumsum(np.concatenate((starts[:, None], w.reshape(len(blocks), self.block)), axis=1), axis=1)[:, 1:]
        changed = np.flatnonzero(sums[:, -1] != self.ends[blocks])
        if changed.size:
            first = int(blocks[changed[0]]) * self.block
            raise ValueError(
                f"{self.where}: the callable gave other weights for samples {first}..{min(first + self.block, self.n) - 1} "
                "than when the loader was built; it must be a pure function of the indices"
            )
        found = np.empty(int(inside.sum()), dtype=np.int64)
        xs = x[inside]
        for k, first in enumerate(blocks * self.block):
            mine = which == k
            found[mine] = first + np.searchsorted(sums[k], xs[mine], side="right")
        out[inside] = np.minimum(found, self.n - 1)
        return out


def weight_table(weights: Any, n: int, where: str) -> CumulativeWeights | BlockedWeights:
    """The draws' table for ``weights``: one per sample (an array, held whole) or a callable of
    the indices (`BlockedWeights`); checked, errors beginning with ``where``."""
    if isinstance(weights, (CumulativeWeights, BlockedWeights)):
        if weights.n != n:
            raise ValueError(f"{where}: {weights.n} weights for {n} samples; pass one weight per sample of the source")
        return weights
    if callable(weights):
        return BlockedWeights(weights, n, where)
    return CumulativeWeights(check_weights(weights, n, where))


class WeightedOrder:
    """Keyed weighted draws with replacement (an ``order=`` for the sampler).

    Args:
        weights: one weight per sample (`check_weights`), or their table (`weight_table`).
        num_samples: draws per epoch.
    """

    kind = "keyed"
    split = "strided"

    def __init__(self, weights: np.ndarray | CumulativeWeights | BlockedWeights, num_samples: int):
        self.table = weights if isinstance(weights, (CumulativeWeights, BlockedWeights)) else CumulativeWeights(weights)
        self.n, self.num_samples = self.table.n, int(num_samples)

    def mixture_state(self) -> dict:
        """What a saved state records of the draws, the same for an array and a callable of the same
        weights."""
        return {"sample_weights": f"{self.n} weights, crc32 {self.table.crc:08x}", "num_samples": self.num_samples}

    def positions(self, p: np.ndarray, *, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
        """The samples drawn at draws ``p`` of epoch ``epoch``."""
        p = np.asarray(p, dtype=np.int64)
        z = p.astype(np.uint64) + np.uint64(derive_key(seed, epoch, _WEIGHTED) & M64)
        u = (mix64_array(z) >> np.uint64(11)).astype(np.float64) * 2.0**-53 * self.table.total
        return self.table.locate(u)

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

        def lookup(j: np.ndarray) -> np.ndarray:
            return self.positions((rank + j * world_size) % max(n, 1), seed=seed, epoch=epoch)

        return RankBatches(count, per_rank, batch_size, lookup)
