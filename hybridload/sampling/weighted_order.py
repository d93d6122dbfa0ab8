"""Per-sample weights (`hybridload.sources.Weighted`): torch's ``WeightedRandomSampler`` semantics
(``num_samples`` draws per epoch, with replacement, sample ``i`` drawn with probability
``w_i / sum(w)``), keyed: draw ``p`` of epoch ``e`` is a pure function of (seed, e, p), so a batch
is computed on its own, in O(batch log n), and a resume at any world size continues the same draws.

Draw ``p`` takes the uniform ``u = (splitmix64(key(seed, epoch) + p) >> 11) / 2**53`` and the sample
whose slot of the weights' cumulative sum holds it (a binary search of the one float64 array of
cumulative weights). Ranks take draws ``r, r + W, ...`` as DistributedSampler; ``shuffle`` does not
apply (every draw is random). The draws differ from torch's ``torch.multinomial`` stream (another
generator), their distribution is the same.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from hybridload.keyed import M64, derive_key, mix64_array
from hybridload.sampling.keyed_order import RankBatches
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
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if bad.size:
        raise ValueError(
            f"{where}: sample {int(bad[0])}'s weight is {float(w[bad[0]])}; weights must be finite and >= 0 (0: never drawn)"
        )
    if not w.sum() > 0:
        raise ValueError(f"{where}: every weight is 0; give at least one sample a weight > 0")
    return w


class WeightedOrder:
    """Keyed weighted draws with replacement (an ``order=`` for the sampler).

    Args:
        weights: one weight per sample (`check_weights`).
        num_samples: draws per epoch.
    """

    kind = "keyed"
    split = "strided"

    def __init__(self, weights: np.ndarray, num_samples: int):
        self.cdf = np.cumsum(weights, dtype=np.float64)
        self.n, self.num_samples = len(weights), int(num_samples)
        self._crc = zlib.crc32(np.asarray(weights, dtype=np.float64).tobytes())

    def mixture_state(self) -> dict:
        """What a saved state records of the draws; a resume with other weights is refused naming them."""
        return {"sample_weights": f"{self.n} weights, crc32 {self._crc:08x}", "num_samples": self.num_samples}

    def positions(self, p: np.ndarray, *, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
        """The samples drawn at draws ``p`` of epoch ``epoch``."""
        p = np.asarray(p, dtype=np.int64)
        z = p.astype(np.uint64) + np.uint64(derive_key(seed, epoch, _WEIGHTED) & M64)
        u = (mix64_array(z) >> np.uint64(11)).astype(np.float64) * 2.0**-53 * self.cdf[-1]
        return np.minimum(np.searchsorted(self.cdf, u, side="right"), self.n - 1).astype(np.int64)

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
