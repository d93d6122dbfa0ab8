"""`Mix`: several sources in one epoch by weight, in exact per-epoch quotas; its indices are its
sources' one after another, as torch's ``ConcatDataset`` (the order: `hybridload.sampling._mix_order`;
docs/guide/mixtures.md)."""

from __future__ import annotations

import bisect
import math
import numbers
from dataclasses import replace
from typing import Any, Iterator, Sequence

from hybridload.sampling._keyed_shard_order import keyed_order_for
from hybridload.sampling._mix_order import MixOrder, quotas
from hybridload.sources._base import SampleRef, Source
from hybridload.sources._reads import read_many

EXAMPLE = "write e.g. Mix([(laion, 0.7), (imagenet, 0.3)])"


def _check_weight(w: Any, k: int) -> float:
    if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(w) or w <= 0:
        raise ValueError(
            f"Mix: source {k}'s weight must be a finite number > 0, got {w!r}; {EXAMPLE} "
            "(weights are normalized by their sum; drop a source to give it none)"
        )
    return float(w)


class Mix(Source):
    """Sources drawn in one epoch by weight: source ``k`` fills exactly ``q_k`` of the epoch's
    ``epoch_length`` positions (``w_k / sum(w) * epoch_length`` by largest remainder), in its
    own keyed order, interleaved by a keyed rule (`hybridload.sampling._mix_order`).

    Args:
        sources: ``(source, weight)`` pairs; weights are positive and normalized by their sum.
        epoch_length: positions per epoch; default: the sources' samples together.
        repeat: allow up-sampling: a source whose quota exceeds its samples repeats within an
            epoch (each run through it in a new order). False refuses such a quota, naming the
            source. A quota below a source's samples (down-sampling) takes a fresh part of it
            every epoch, every sample before any repeats.
        names: one name per source, for ``stats()`` and the saved state; default
            ``"0:ImageFolder"``, ``"1:TarShards"``, ...
    """

    def __init__(
        self,
        sources: Sequence[tuple[Source, float]],
        *,
        epoch_length: int | None = None,
        repeat: bool = False,
        names: Sequence[str] | None = None,
    ):
        pairs = list(sources) if isinstance(sources, (list, tuple)) else None
        if not pairs:
            raise ValueError(
                f"Mix: sources must be a non-empty list of (source, weight) pairs, got {sources!r}; {EXAMPLE}"
            )
        for k, pair in enumerate(pairs):
            if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], Source)):
                raise ValueError(
                    f"Mix: entry {k} must be a (source, weight) pair with a hybridload source, got {pair!r}; {EXAMPLE}"
                )
        self.sources = [src for src, _ in pairs]
        self.weights = [_check_weight(w, k) for k, (_, w) in enumerate(pairs)]
        self.sizes = [len(src) for src in self.sources]
        self.names = [f"{k}:{type(s).__name__}" for k, s in enumerate(self.sources)] if names is None else list(names)
        if len(self.names) != len(self.sources) or len(set(self.names)) != len(self.names):
            raise ValueError(f"Mix: names must be {len(self.sources)} distinct strings, one per source, got {names!r}")
        for k, n in enumerate(self.sizes):
            if n == 0:
                raise ValueError(f"Mix: source {self.names[k]} has no samples; drop it from the mixture")
        if not isinstance(repeat, bool):
            raise ValueError(f"Mix: repeat must be True or False, got {repeat!r}")
        total = sum(self.sizes)
        length = total if epoch_length is None else epoch_length
        if isinstance(length, bool) or not isinstance(length, numbers.Integral) or length < 1:
            raise ValueError(
                f"Mix: epoch_length must be an int >= 1 (positions per epoch), got {epoch_length!r}; "
                f"write e.g. epoch_length={total} (the sources' samples together, the default)"
            )
        self.epoch_length: int = int(length)
        self.repeat: bool = repeat
        self.quotas: tuple[int, ...] = quotas(self.weights, self.epoch_length)
        self.offsets: list[int] = [sum(self.sizes[:k]) for k in range(len(self.sizes))]
        for k, (q, n) in enumerate(zip(self.quotas, self.sizes)):
            if q == 0:
                raise ValueError(
                    f"Mix: source {self.names[k]} gets 0 of the epoch's {self.epoch_length} positions (weight "
                    f"{self.weights[k]:g}); raise its weight or epoch_length, or drop it"
                )
            if q > n and not repeat:
                raise ValueError(
                    f"Mix: source {self.names[k]} holds {n} samples but its weight gives it {q} of the epoch's "
                    f"{self.epoch_length} positions; pass repeat=True to up-sample it (its samples repeat within "
                    "an epoch), or lower its weight or epoch_length"
                )

    def __len__(self) -> int:
        return self.epoch_length

    def locate(self, index: int) -> tuple[int, int]:
        """(source, its sample) of the mixture's index ``index``."""
        if not 0 <= index < sum(self.sizes):
            raise IndexError(f"Mix: index {index} out of range for {sum(self.sizes)} samples of its sources")
        k = bisect.bisect_right(self.offsets, int(index)) - 1
        return k, int(index) - self.offsets[k]

    def source_of(self, indices: Any) -> list[int]:
        """The source of each of the mixture's ``indices`` (a batch's, for ``stats()``)."""
        return [bisect.bisect_right(self.offsets, int(i)) - 1 for i in indices]

    def ref(self, index: int) -> SampleRef:
        k, j = self.locate(index)
        return replace(self.sources[k].ref(j), index=int(index))

    def read(self, ref: SampleRef) -> tuple[Any, int]:
        k, j = self.locate(ref.index)
        return self.sources[k].read(replace(ref, index=j))

    def read_many(self, refs: Sequence[SampleRef]) -> Iterator[Any]:
        """Each source's reads of its refs at once (its own ``read_many``: a sharded source's
        shards fetched whole), outcomes in the batch's order."""
        groups: dict[int, list[SampleRef]] = {}
        which = []
        for ref in refs:
            k, j = self.locate(ref.index)
            groups.setdefault(k, []).append(replace(ref, index=j))
            which.append(k)
        return _Interleaved(which, {k: read_many(self.sources[k], g) for k, g in groups.items()})

    def sample_order(self) -> MixOrder:
        """The mixture's order: quotas, keyed interleaving, each source's keyed order."""
        orders = [keyed_order_for(src.sample_order()) for src in self.sources]
        return MixOrder(self.sizes, self.quotas, orders, self.offsets, state=self.mixture_state)

    def mixture_state(self) -> dict:
        """What a saved state records of the mixture; a resume with any of it changed is refused by name."""
        return {
            "weights": list(self.weights),
            "epoch_length": self.epoch_length,
            "repeat": self.repeat,
            "quotas": list(self.quotas),
            "sources": [src.fingerprint() for src in self.sources],
        }

    def fingerprint(self) -> str:
        parts = "; ".join(f"{name}: {src.fingerprint()}" for name, src in zip(self.names, self.sources))
        return f"Mix; samples: {len(self)}; {parts}"


class _Interleaved:
    """Outcomes of several sources' reads in the batch's order; ``close()`` closes them all."""

    def __init__(self, which: list[int], reads: dict):
        self._which, self._reads, self._at = which, reads, 0

    def __iter__(self) -> "_Interleaved":
        return self

    def __next__(self) -> Any:
        if self._at >= len(self._which):
            raise StopIteration
        k = self._which[self._at]
        self._at += 1
        return next(self._reads[k])  # (payload, label) or the SampleError naming the source's sample

    def close(self) -> None:
        for reads in self._reads.values():
            close = getattr(reads, "close", None)
            if close is not None:
                close()


class DeliveredCounts:
    """Samples delivered per source of a `Mix` (``stats()["sources"]``), counted in the trainer
    from each delivered batch's indices; `of` gives None for a source that is not a mixture.

    Args:
        mix: the mixture.
    """

    def __init__(self, mix: Mix):
        self._mix, self._counts = mix, [0] * len(mix.sources)

    @classmethod
    def of(cls, source: Source) -> "DeliveredCounts | None":
        return cls(source) if isinstance(source, Mix) else None

    def add(self, indices: Any) -> None:
        for k in self._mix.source_of(indices):
            self._counts[k] += 1

    def as_dict(self) -> dict:
        return dict(zip(self._mix.names, self._counts))

    def reset(self) -> None:
        self._counts = [0] * len(self._counts)
