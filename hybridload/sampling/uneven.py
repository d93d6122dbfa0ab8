"""``even_batches=False`` (Accelerate's name): each rank takes its share of an epoch with no
padding, so an evaluation counts every sample exactly once; ranks may get different numbers of
batches.

DistributedSampler pads the epoch's order by repeating its start until every rank has the same
number of samples: right for training (DDP's backward synchronizes every step), wrong for a
metric, which then counts up to ``world_size - 1`` samples twice. Here a rank's batches are the
even split's with the padding cut off: the same samples in the same places, the padded tail
gone, so rank ``r`` of ``W`` gets ``ceil((n - r) / W)`` samples with DistributedSampler's strided
split (``r * per`` onwards of a contiguous split), and its last batch may be short or missing.
A loop over such a loader must not call a collective every step (the ranks with fewer batches
stop calling it): gather the metric once after the loop (the guide's DDP evaluation loop).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from hybridload.sampling.keyed_order import RankBatches


def check_even_batches(even_batches: object, drop_last: bool, where: str) -> bool:
    """``even_batches`` as a bool; False with ``drop_last=True`` is refused (dropping already
    leaves no padding, and would drop samples an evaluation must count)."""
    if not isinstance(even_batches, bool):
        raise ValueError(f"{where}: even_batches must be True or False, got {even_batches!r}")
    if not even_batches and drop_last:
        raise ValueError(
            f"{where}: even_batches=False counts every sample once (for evaluation) and drop_last=True drops some; "
            "pass drop_last=False with even_batches=False"
        )
    return even_batches


def real_samples(n: int, *, world_size: int, rank: int, split: str) -> int:
    """The samples of rank ``rank`` that are not padding, of an epoch (or plan) of ``n`` positions."""
    if split == "strided":
        return max(0, math.ceil((n - rank) / world_size))
    per = math.ceil(n / world_size) if n else 0
    return min(per, max(0, n - rank * per))


def without_padding(batches: Sequence[np.ndarray], real: int, batch_size: int) -> RankBatches:
    """A rank's even batches cut to its first ``real`` samples (each batch computed when asked)."""
    count = math.ceil(real / batch_size)

    def lookup(j: np.ndarray) -> np.ndarray:
        if not len(j):
            return np.empty(0, dtype=np.int64)
        b = int(j[0]) // batch_size
        return np.asarray(batches[b], dtype=np.int64)[: len(j)]

    return RankBatches(count, real, batch_size, lookup)
