"""Weighted: a source drawn by per-sample weights (class balance), with torch's
``WeightedRandomSampler`` semantics, keyed and resumable (`hybridload.sampling.weighted_order`)."""

from __future__ import annotations

import numbers
from typing import Any, Iterator, Sequence

from hybridload.sampling.weighted_order import WeightedOrder, check_weights
from hybridload.sources._base import SampleRef, Source


class Weighted(Source):
    """``source``'s samples drawn with replacement, sample ``i`` with probability ``w_i / sum(w)``,
    ``num_samples`` draws per epoch (``len``), as torch's ``WeightedRandomSampler(weights,
    num_samples, replacement=True)``; each draw keyed by (seed, epoch, draw), so the stream is the
    same on every lane and a checkpoint resumes it at any world size. Indices are the source's.

    Args:
        source: the source drawn from.
        weights: one non-negative weight per sample of ``source`` (held as one float64 array:
            8 bytes per sample).
        num_samples: draws per epoch; default ``len(source)``.
    """

    def __init__(self, source: Source, weights: Any, *, num_samples: int | None = None):
        if not isinstance(source, Source):
            raise ValueError(f"Weighted: source must be a hybridload source, got {type(source).__name__}")
        self.source: Source = source
        self.weights = check_weights(weights, len(source), "Weighted")
        draws = len(source) if num_samples is None else num_samples
        if isinstance(draws, bool) or not isinstance(draws, numbers.Integral) or draws < 1:
            raise ValueError(f"Weighted: num_samples must be an int >= 1 (draws per epoch), got {num_samples!r}")
        self.num_samples: int = int(draws)

    def __len__(self) -> int:
        return self.num_samples

    def ref(self, index: int) -> SampleRef:
        return self.source.ref(index)

    def read(self, ref: SampleRef) -> tuple[Any, int]:
        return self.source.read(ref)

    def read_many(self, refs: Sequence[SampleRef]) -> Iterator[Any]:
        return self.source.read_many(refs)

    def sample_order(self) -> WeightedOrder:
        """The keyed weighted draws (the source's own order does not apply: draws are independent)."""
        return WeightedOrder(self.weights, self.num_samples)

    def fingerprint(self) -> str | None:
        return self.source.fingerprint()
