"""A mixture's order (`hybridload.sampling._mix_order`): exact quotas at every world size, each
source in its own keyed order, keyed interleaving, exact and elastic resume, another mixture refused."""

from __future__ import annotations

import json
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from hybridload.errors import ResumeMismatchError
from hybridload.sampling._keyed_order import KeyedOrder
from hybridload.sampling._keyed_shard_order import KeyedShardOrder
from hybridload.sampling._mix_order import BLOCK, MixOrder, counts_before, quotas
from hybridload.sampling._sampler import DistributedBatchSampler
from hybridload.sources import Mix, Source

from support.resume_helper import check_resume


class Sized(Source):
    """``n`` samples in name only (the order never reads them); ``shards``: their shard sizes."""

    def __init__(self, n: int, tag: str = "s", shards=None):
        self.n, self.tag, self.shards = n, tag, shards

    def __len__(self):
        return self.n

    def sample_order(self):
        return None if self.shards is None else KeyedShardOrder(self.shards, 2)

    def fingerprint(self):
        return f"Sized; samples: {self.n}; tag: {self.tag}"


def three(epoch_length=1200, weights=(0.5, 0.3, 0.2), repeat=True):
    return Mix(
        [
            (Sized(500, "a"), weights[0]),
            (Sized(70, "b", shards=[20, 30, 20]), weights[1]),
            (Sized(90, "c"), weights[2]),
        ],
        epoch_length=epoch_length,
        repeat=repeat,
    )


def epoch_of(mix, *, world_size, batch_size=7, epoch=0, seed=5, drop_last=False):
    """Every rank's batches of an epoch: {rank: [index, ...]}."""
    order = mix.sample_order()
    return {
        r: [
            i
            for b in DistributedBatchSampler(
                len(mix), batch_size, seed=seed, rank=r, world_size=world_size, order=order, drop_last=drop_last
            ).batches(epoch)
            for i in b.tolist()
        ]
        for r in range(world_size)
    }


def test_quotas_are_the_largest_remainder_rounding_and_sum_to_the_epoch_length():
    assert quotas([1, 1, 1], 10) == (4, 3, 3)  # the leftover unit to the earliest of equal remainders
    assert quotas([0.7, 0.3], 1000) == (700, 300)
    assert quotas([2, 1], 7) == (5, 2)  # 4.67 and 2.33: the remainder .67 wins the unit
    rng = np.random.default_rng(0)
    for _ in range(200):
        w = rng.random(rng.integers(1, 6)) + 0.01
        length = int(rng.integers(1, 10_000))
        q = quotas(w.tolist(), length)
        exact = [Fraction(x) * length / sum(map(Fraction, w.tolist())) for x in w.tolist()]
        assert sum(q) == length
        assert all(abs(qk - e) < 1 for qk, e in zip(q, exact))


def test_the_counts_before_a_position_are_monotone_and_end_at_the_quotas():
    q = (700, 1, 299, 50, 13)
    prev = counts_before(0, q)
    assert prev == [0] * 5
    for x in range(1, sum(q) + 1):
        now = counts_before(x, q)
        assert sum(now) == x and all(0 <= b - a <= 1 for a, b in zip(prev, now))
        prev = now
    assert tuple(prev) == q


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_each_epochs_quota_is_exact_at_world_sizes_one_to_four(world_size):
    mix = three()
    for epoch in (0, 3):
        got = [i for r in epoch_of(mix, world_size=world_size, epoch=epoch).values() for i in r]
        assert len(got) == len(mix)  # 1200 divides among 1-4 ranks: no padding
        assert Counter(mix.source_of(got)) == {0: 600, 1: 360, 2: 240}


def test_every_block_of_the_interleaving_holds_each_sources_share_within_one():
    mix = three()
    order = mix.sample_order()
    src, _ = order.sources_at(np.arange(len(mix)), seed=1, epoch=2, shuffle=True)
    for start in range(0, len(mix), BLOCK):
        part = src[start : start + BLOCK]
        for k, q in enumerate(mix.quotas):
            assert abs((part == k).sum() - q * len(part) / len(mix)) < 1 + 1e-9


def own_stream(order, n, seed, epochs):
    """A source's own keyed order, epoch after epoch, as it gives it alone."""
    return [
        i
        for t in range(epochs)
        for i in order.rank_indices(n, seed=seed, epoch=t, world_size=1, rank=0, shuffle=True, drop_last=False).tolist()
    ]


def test_each_sources_samples_come_in_its_own_keyed_order_epoch_after_epoch():
    mix = three()
    order = mix.sample_order()
    mixed = [i for e in range(3) for i in order.positions(np.arange(len(mix)), seed=5, epoch=e, shuffle=True).tolist()]
    own = [
        own_stream(KeyedOrder(), 500, 5, 4),
        own_stream(KeyedShardOrder([20, 30, 20], 2), 70, 5, 16),
        own_stream(KeyedOrder(), 90, 5, 9),
    ]
    for k in range(3):
        drawn = [i - mix.offsets[k] for i in mixed if mix.source_of([i]) == [k]]
        assert len(drawn) == 3 * mix.quotas[k]
        assert drawn == own[k][: len(drawn)], f"source {k} left its own order"


def test_a_down_sampled_source_reaches_every_sample_before_any_repeats():
    mix = Mix([(Sized(300), 0.5), (Sized(40), 0.5)], epoch_length=120, repeat=True)  # source 0: 60 of 300 per epoch
    order = mix.sample_order()
    seen = [
        i for e in range(5) for i in order.positions(np.arange(120), seed=0, epoch=e, shuffle=True).tolist() if i < 300
    ]
    assert sorted(seen) == list(range(300))  # five epochs: each sample once


def test_the_interleaving_is_keyed_by_seed_and_epoch_and_does_not_depend_on_the_batches_asked():
    mix = three()
    whole = mix.sample_order().positions(np.arange(len(mix)), seed=5, epoch=1, shuffle=True)
    fresh = mix.sample_order()
    parts = [
        fresh.positions(np.arange(a, min(a + 333, len(mix))), seed=5, epoch=1, shuffle=True) for a in (999, 0, 666, 333)
    ]
    assert np.concatenate([parts[1], parts[3], parts[2], parts[0]]).tolist() == whole.tolist()
    assert not np.array_equal(whole, mix.sample_order().positions(np.arange(len(mix)), seed=6, epoch=1, shuffle=True))
    assert not np.array_equal(whole, mix.sample_order().positions(np.arange(len(mix)), seed=5, epoch=2, shuffle=True))


def test_a_batch_of_a_billion_position_mixture_is_computed_without_the_epoch():
    mix = Mix([(Sized(600_000_000), 0.6), (Sized(300_000_000, shards=[1000] * 300_000), 0.3), (Sized(10**8), 0.1)])
    assert len(mix) == 10**9 and mix.quotas == (600_000_000, 300_000_000, 100_000_000)
    batches = DistributedBatchSampler(len(mix), 256, seed=1, rank=3, world_size=8, order=mix.sample_order()).batches(7)
    last = batches[len(batches) - 1]
    assert len(batches[5]) == 256 and ((0 <= last) & (last < 10**9)).all()


def test_a_mixture_sampler_resumes_exactly_mid_epoch():
    mix = three(epoch_length=90)
    check_resume(
        lambda: DistributedBatchSampler(len(mix), 8, seed=3, rank=0, world_size=1, order=mix.sample_order()),
        key=tuple,
    )


@pytest.mark.parametrize("resumed_at", [1, 3, 4])
def test_a_state_saved_at_two_ranks_resumes_at_another_world_size_with_each_position_once(resumed_at):
    mix = three()
    full = Counter(i for r in epoch_of(mix, world_size=1, batch_size=1200, epoch=1).values() for i in r)
    head, state = [], None
    for r in range(2):
        s = DistributedBatchSampler(len(mix), 7, seed=5, rank=r, world_size=2, order=mix.sample_order())
        s.set_epoch(1)
        it = iter(s)
        head += [i for _ in range(30) for i in next(it)]
        state = json.loads(json.dumps(s.state_dict()))
    assert state["mixture"]["weights"] == [0.5, 0.3, 0.2] and len(state["mixture"]["sources"]) == 3
    rest = []
    for r in range(resumed_at):
        s = DistributedBatchSampler(len(mix), 5, seed=5, rank=r, world_size=resumed_at, order=mix.sample_order())
        s.load_state_dict(state)
        assert s.epoch == 1
        rest += [i for b in s for i in b]
    got = Counter(head + rest)
    assert not full - got, "a sample of the epoch's quota never came"
    assert sum((got - full).values()) < resumed_at, "more than the last batches' padding came twice"


@pytest.mark.parametrize(
    ("changed", "field"),
    [
        (dict(weights=(0.4, 0.4, 0.2)), "weights"),
        (dict(epoch_length=1100), "epoch_length"),
    ],
)
def test_a_state_of_another_mixture_is_refused_naming_what_differs(changed, field):
    saved = DistributedBatchSampler(1200, 8, order=three().sample_order(), rank=0, world_size=1)
    mix = three(**changed)
    other = DistributedBatchSampler(
        len(mix), 8, order=mix.sample_order(), rank=0, world_size=1, fingerprint=mix.fingerprint
    )
    state = saved.state_dict()
    with pytest.raises(ResumeMismatchError) as err:
        other.load_state_dict(state)
    assert err.value.field == field and f"{field}=" in str(err.value)
    with pytest.raises(ResumeMismatchError, match="mixture"):
        DistributedBatchSampler(1200, 8, rank=0, world_size=1, order="keyed").load_state_dict(state)


def test_a_mixture_order_refuses_a_sampler_of_another_size():
    with pytest.raises(ValueError, match="build the sampler from len"):
        DistributedBatchSampler(1000, 8, rank=0, world_size=1, order=three().sample_order()).batches(0)


def test_an_unshuffled_mixture_keeps_each_source_in_its_own_index_order():
    mix = three(epoch_length=600)
    idx = mix.sample_order().positions(np.arange(600), seed=0, epoch=0, shuffle=False)
    for k in range(3):
        drawn = [i - mix.offsets[k] for i in idx.tolist() if mix.source_of([i]) == [k]]
        assert drawn == [j % mix.sizes[k] for j in range(mix.quotas[k])]


def test_mix_order_keeps_nothing_per_sample():
    order = three().sample_order()
    order.positions(np.arange(0, 1200, 7), seed=1, epoch=0, shuffle=True)
    assert len(order._blocks) <= 2 and isinstance(order, MixOrder)
