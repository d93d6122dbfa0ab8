"""Weighted: a source drawn by per-sample weights (class balance), with torch's
``WeightedRandomSampler`` semantics, keyed and resumable (`hybridload.sampling._weighted_order`)."""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from hybridload.sampling._weighted_order import WeightedOrder, check_num_samples, weight_table
from hybridload.sources._base import SampleRef, Source


class Weighted(Source):
    """``source``'s samples drawn with replacement, sample ``i`` with probability ``w_i / sum(w)``,
    ``num_samples`` draws per epoch (``len``), as torch's ``WeightedRandomSampler(weights,
    num_samples, replacement=True)``; each draw keyed by (seed, epoch, draw), so the stream is the
    same on every lane and a checkpoint resumes it at any world size. Indices are the source's.

    Args:
        source: the source drawn from.
        weights: one non-negative weight per sample of ``source`` (held as one float64 array:
            8 bytes per sample), or a function of an int64 array of indices returning their
            weights, for sources too large for that: called once over every index here (O(n)),
            then per batch over the blocks of 1,024 samples its draws fall in; one float64 held
            per block, the same draws as the array of the same weights. It must be a pure
            function of the indices.
        num_samples: draws per epoch; default ``len(source)``.
    """

    def __init__(self, source: Source, weights: Any, *, num_samples: int | None = None):
        if not isinstance(source, Source):
            raise ValueError(f"Weighted: source must be a hybridload source, got {type(source).__name__}")
        self.source: Source = source
        self.num_samples: int = check_num_samples(num_samples, len(source), "Weighted")
        self.weights = weight_table(weights, len(source), "Weighted")

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
