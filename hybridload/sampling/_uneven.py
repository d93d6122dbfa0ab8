"""``even_batches=False`` (Accelerate's name): each rank's share without padding, so an evaluation
counts every sample once; ranks may get different numbers of batches, so the loop gathers its metric
once after the epoch, not every step (docs/guide/guarantees.md, "Evaluation counts each sample
once")."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from hybridload.sampling._keyed_order import RankBatches


def check_even_batches(even_batches: object, drop_last: bool, where: str) -> bool:
    """``even_batches`` as a bool; False with ``drop_last=True`` is refused, since dropping loses
    samples an evaluation must count."""
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
