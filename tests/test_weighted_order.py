"""Per-sample weights (`hybridload.sampling._weighted_order`, `sources.Weighted`): torch's
WeightedRandomSampler's draws with replacement, keyed: the same draws split among any ranks,
exact resume, other weights refused by name."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from hybridload.errors import ResumeMismatchError
from hybridload.sampling._sampler import DistributedBatchSampler

from support.resume_helper import check_resume
from test_mix_order import Sized


def weighted_sampler(weights, num_samples, world_size=1, rank=0, bs=16):
    from hybridload.sampling._weighted_order import WeightedOrder, check_weights

    order = WeightedOrder(check_weights(weights, len(weights), "test"), num_samples)
    return DistributedBatchSampler(num_samples, bs, seed=2, rank=rank, world_size=world_size, order=order)


def test_per_sample_weights_draw_with_replacement_in_proportion_and_never_a_zero_weight():
    w = np.array([0.0, 1.0, 3.0, 0.0, 6.0])
    drawn = [i for b in weighted_sampler(w, 20_000) for i in b]
    freq = np.bincount(drawn, minlength=5) / len(drawn)
    assert freq[0] == freq[3] == 0
    assert np.allclose(freq, w / w.sum(), atol=0.015)  # 20,000 draws: 3 standard deviations ~ 0.01


def test_per_sample_weights_draws_are_the_same_split_among_any_ranks_and_resume_exactly():
    w = np.arange(1, 41, dtype=float)
    whole = [i for b in weighted_sampler(w, 120, bs=120) for i in b]
    for world in (2, 3):
        per = [[i for b in weighted_sampler(w, 120, world, r, bs=5) for i in b] for r in range(world)]
        assert [per[p % world][p // world] for p in range(120)] == whole
    check_resume(lambda: weighted_sampler(w, 60, bs=7), key=tuple)
    s = weighted_sampler(w, 60)
    state = s.state_dict()
    w2 = w.copy()
    w2[3] = 9
    with pytest.raises(ResumeMismatchError, match="sample_weights"):
        weighted_sampler(w2, 60).load_state_dict(state)


def test_per_sample_weights_are_checked_naming_the_sample():
    from hybridload.sources import Weighted

    src = Sized(3)
    with pytest.raises(ValueError, match="2 weights for 3 samples"):
        Weighted(src, [1, 2])
    with pytest.raises(ValueError, match="sample 1's weight is -1.0"):
        Weighted(src, [1, -1, 2])
    with pytest.raises(ValueError, match="every weight is 0"):
        Weighted(src, [0, 0, 0])
    assert len(Weighted(src, [1, 1, 1], num_samples=10)) == 10


def tables(weights, **blocked):
    """The array's table and the callable's (``blocked``: its block and chunk sizes) of one set of weights."""
    from hybridload.sampling._weighted_order import BlockedWeights, weight_table

    w = np.asarray(weights, dtype=np.float64)
    return weight_table(w, len(w), "test"), BlockedWeights(lambda idx: w[idx], len(w), "test", **blocked)


@pytest.mark.parametrize("blocked", [{"block": 64, "chunk": 256}, {}], ids=["small blocks", "default blocks"])
def test_weights_given_by_a_callable_draw_the_very_samples_the_array_of_those_weights_draws(blocked):
    from hybridload.sampling._weighted_order import WeightedOrder

    rng = np.random.default_rng(4)
    w = rng.exponential(size=100_003) * (rng.random(100_003) < 0.8)  # a fifth weigh nothing; a partial last block
    held, blocked_table = tables(w, **blocked)
    p = np.arange(50_000)
    for epoch in (0, 1):
        a = WeightedOrder(held, 50_000).positions(p, seed=5, epoch=epoch)
        b = WeightedOrder(blocked_table, 50_000).positions(p, seed=5, epoch=epoch)
        assert np.array_equal(a, b)
        assert not np.any(w[a] == 0)
    x = np.concatenate([held.cdf[::997], held.cdf[::997] - 1e-9, [0.0, held.total]])  # on and beside every slot's edge
    assert np.array_equal(held.locate(x), blocked_table.locate(x))
    assert WeightedOrder(held, 9).mixture_state() == WeightedOrder(blocked_table, 9).mixture_state()


def test_weights_given_by_a_callable_hold_one_sum_per_block_not_a_weight_per_sample():
    from hybridload.sampling._weighted_order import BlockedWeights

    n = 5_000_000
    tracemalloc.start()  # numpy's buffers are traced too: a view would keep its whole chunk alive
    try:
        table = BlockedWeights(lambda idx: 1.0 + (idx % 7 == 0), n, "test", chunk=1 << 16)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert table.ends.nbytes == 8 * -(-n // 1024) and held < 200_000  # 39 KB, against 40 MB for the weights
    assert peak < 8e6  # a few chunks of 2^16 at once while summing (all 76 of them: 40 MB)
    x = np.linspace(0, table.total, 4096, endpoint=False)
    cdf = np.cumsum(1.0 + (np.arange(n) % 7 == 0))  # here only, to compare
    assert table.total == cdf[-1] and np.array_equal(table.locate(x), np.searchsorted(cdf, x, side="right"))


def test_a_callable_of_weights_is_checked_naming_the_argument_and_the_sample():
    from hybridload.sampling._weighted_order import BlockedWeights

    def make(fn, n=3000):
        return BlockedWeights(fn, n, "HybridLoader: sample_weights", chunk=2048)

    with pytest.raises(ValueError, match="sample_weights: the callable returned 1 weights for 2048 indices"):
        make(lambda idx: [1.0])
    with pytest.raises(ValueError, match="sample_weights: sample 2100's weight is -1.0"):
        make(lambda idx: np.where(idx == 2100, -1.0, 1.0))
    with pytest.raises(ValueError, match="sample_weights: every weight is 0"):
        make(lambda idx: np.zeros(len(idx)))
    with pytest.raises(
        ValueError, match=r"sample_weights: the callable's weights for indices 0\.\.2047 are not numbers"
    ):
        make(lambda idx: ["heavy"] * len(idx))
    calls = []

    def drifting(idx):
        calls.append(len(idx))
        return np.full(len(idx), float(len(calls)))  # other weights at every call: not a function of the indices

    table = make(drifting)
    with pytest.raises(ValueError, match=r"other weights for samples 1024\.\.2047 .* pure function of the indices"):
        table.locate(np.array([table.total * 0.5]))


def test_weights_given_by_a_callable_resume_exactly_and_refuse_other_weights():
    from hybridload.sampling._weighted_order import BlockedWeights, WeightedOrder

    w = np.arange(1, 41, dtype=float)

    def sampler(weights):
        order = WeightedOrder(BlockedWeights(lambda idx: weights[idx], 40, "test", block=8), 60)
        return DistributedBatchSampler(60, 7, seed=2, order=order)

    check_resume(lambda: sampler(w), key=tuple)
    state = weighted_sampler(w, 60, bs=7).state_dict()  # the array's state: the same weights, accepted
    sampler(w).load_state_dict(state)
    w2 = w.copy()
    w2[[3, 4]] = w2[[4, 3]]  # two weights swapped: the same total
    with pytest.raises(ResumeMismatchError, match="sample_weights"):
        sampler(w2).load_state_dict(state)
