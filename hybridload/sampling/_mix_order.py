"""The order of a mixture of sources (`Mix`): exact per-epoch quotas by largest remainder, each
source read as its own keyed order would read it, interleaved in blocks of `BLOCK` by a keyed
permutation, ranks taking contiguous spans; computed batch by batch, nothing per sample held (the
rules: docs/guide/mixtures.md)."""

from __future__ import annotations

from fractions import Fraction
from collections.abc import Mapping
from typing import Any, Callable, Sequence

import numpy as np

from hybridload.errors import ResumeMismatchError
from hybridload._keyed import derive_key
from hybridload.sampling._keyed_order import (
    KeyedPermutation,
    RankBatches,
    contiguous_rank_batches,
    whole_rank,
)

#: positions per interleaving block: a batch's positions meet one or two of them
BLOCK = 1024
_MIX = 0x6D6978  # "mix": the blocks' keys apart from the sources' own orders


def quotas(weights: Sequence[float], epoch_length: int) -> tuple[int, ...]:
    """Each source's positions in an epoch: the largest-remainder rounding of
    ``w_k / sum(w) * epoch_length``, ties to the earlier source; they sum to ``epoch_length``."""
    exact = [Fraction(w) for w in weights]
    total = sum(exact)
    shares = [w * epoch_length / total for w in exact]
    out = [int(s) for s in shares]  # floor: shares are >= 0
    left = epoch_length - sum(out)
    by_remainder = sorted(range(len(out)), key=lambda k: (-(shares[k] - out[k]), k))
    for k in by_remainder[:left]:
        out[k] += 1
    return tuple(out)


def counts_before(x: int, q: Sequence[int]) -> list[int]:
    """Positions of each source among the epoch's first ``x``: the floor rule down a binary tree of
    the sources, monotone in ``x`` and ``q`` itself at ``sum(q)``, so each block is within one
    sample of its share."""
    out = [0] * len(q)

    def split(lo: int, hi: int, total: int, count: int) -> None:
        if hi - lo == 1:
            out[lo] = count
            return
        mid = (lo + hi) // 2
        a = sum(q[lo:mid])
        left = count * a // total if total else 0
        split(lo, mid, a, left)
        split(mid, hi, total - a, count - left)

    if q:
        split(0, len(q), sum(q), int(x))
    return out


def mixture_fields(order: Any) -> dict:
    """A mixture's part of a state (`MixOrder.mixture_state`: weights, quotas, each source's
    fingerprint), under ``"mixture"``; nothing for another order."""
    mixture = getattr(order, "mixture_state", None)
    return {"mixture": mixture()} if mixture is not None else {}


def check_mixture(state: Mapping, order: Any, where: str) -> None:
    """Refuse a state of another mixture naming the first field that differs, or a mixture's state
    loaded without one (or the reverse)."""
    mine, saved = mixture_fields(order).get("mixture"), state.get("mixture")
    if mine is None and saved is None:
        return
    if mine is None or saved is None:
        raise ResumeMismatchError(
            "mixture", None if saved is None else "a Mix", None if mine is None else "a Mix", where
        )
    for key, value in mine.items():
        if saved.get(key) != value:
            raise ResumeMismatchError(key, saved.get(key), value, where)


class MixOrder:
    """The order of a mixture (an ``order=`` for the sampler).

    Args:
        sizes: each source's samples.
        quota: each source's positions per epoch (`quotas`).
        orders: each source's keyed order.
        offsets: where each source's indices begin in the mixture's index space.
        state: what a saved state records of the mixture, asked when one is saved or loaded.
    """

    kind = "keyed"
    split = "contiguous"

    def __init__(
        self,
        sizes: Sequence[int],
        quota: Sequence[int],
        orders: Sequence[Any],
        offsets: Sequence[int],
        state: Callable[[], dict] | None = None,
    ):
        self.source_sizes, self.quota = tuple(int(s) for s in sizes), tuple(int(q) for q in quota)
        self.orders, self.offsets = tuple(orders), np.asarray(offsets, dtype=np.int64)
        self.n = sum(self.quota)
        self._state = state
        self._blocks: tuple = ()  # ((seed, epoch, block, shuffle), (source, rank)) of the last two blocks met

    def mixture_state(self) -> dict | None:
        """The mixture's part of a saved state (`PassState`): weights, quotas, sources."""
        return self._state() if self._state is not None else None

    def _block(self, seed: int, epoch: int, i: int, shuffle: bool) -> tuple[np.ndarray, np.ndarray]:
        """Block ``i``'s source at each position and that position's rank in its source's quota."""
        key = (seed, epoch, i, shuffle)
        for k, got in self._blocks:
            if k == key:
                return got
        start, stop = i * BLOCK, min((i + 1) * BLOCK, self.n)
        lo, hi = counts_before(start, self.quota), counts_before(stop, self.quota)
        counts = np.asarray(hi, dtype=np.int64) - np.asarray(lo, dtype=np.int64)
        labels = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        if shuffle:
            labels = labels[KeyedPermutation(len(labels), derive_key(seed, epoch, _MIX, i))(np.arange(len(labels)))]
        rank = np.empty_like(labels)
        for k in range(len(counts)):
            at = np.flatnonzero(labels == k)
            rank[at] = lo[k] + np.arange(len(at), dtype=np.int64)
        got = (labels, rank)
        self._blocks = (self._blocks + ((key, got),))[-2:]
        return got

    def sources_at(self, p: np.ndarray, *, seed: int, epoch: int, shuffle: bool) -> tuple[np.ndarray, np.ndarray]:
        """(source, rank in the source's quota of the epoch) at positions ``p`` of the epoch."""
        p = np.asarray(p, dtype=np.int64)
        source, rank = np.empty_like(p), np.empty_like(p)
        block = p // BLOCK
        for i in np.unique(block):
            sel = block == i
            labels, ranks = self._block(seed, epoch, int(i), shuffle)
            source[sel], rank[sel] = labels[p[sel] - i * BLOCK], ranks[p[sel] - i * BLOCK]
        return source, rank

    def positions(self, p: np.ndarray, *, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
        """The mixture's indices (source ``k``'s sample ``j`` is ``offsets[k] + j``) at positions
        ``p`` (in [0, epoch length)) of epoch ``epoch``."""
        from hybridload.sampling._resume import position_lookup

        p = np.asarray(p, dtype=np.int64)
        source, rank = self.sources_at(p, seed=seed, epoch=epoch, shuffle=shuffle)
        out = np.empty_like(p)
        for k in np.unique(source):
            sel = source == k
            n_k = self.source_sizes[int(k)]
            base = int(epoch) * self.quota[int(k)]  # where the epoch's run of the source's stream begins
            first, at = divmod(base, n_k)
            s = at + rank[sel]  # under n_k + q_k: no overflow, however many epochs
            turn, j = s // n_k, s % n_k
            idx = np.empty_like(j)
            for t in np.unique(turn):
                inside = turn == t
                look = position_lookup(self.orders[int(k)], n_k, seed=seed, epoch=first + int(t), shuffle=shuffle)
                idx[inside] = look(j[inside])
            out[sel] = self.offsets[int(k)] + idx
        return out

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
        """This rank's batches of an epoch: a contiguous span of the padded order, each batch
        computed when asked."""
        if n != self.n:
            raise ValueError(
                f"MixOrder: the sampler has {n} samples but the mixture's epoch has {self.n}; "
                "build the sampler from len(mix)"
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
