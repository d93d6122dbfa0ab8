"""The keyed epoch order (hybridload.sampling._keyed_order, keyed_shard_order): a keyed
permutation computed batch by batch, split among ranks as DistributedSampler splits its own,
resumable at any batch, and the shard-aware form's block property."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from hybridload.errors import OrderMismatchError
from hybridload.sampling import sharding
from hybridload.sampling._sampler import DistributedBatchSampler
from hybridload.sampling._keyed_order import KeyedOrder, KeyedPermutation, batch_indices, derive_key
from hybridload.sampling._keyed_shard_order import KeyedShardOrder, check_order, keyed_order_for
from hybridload.sampling._shard_order import ShardOrder

from support.resume_helper import check_resume


def test_the_keyed_permutation_is_a_bijection_for_every_small_n():
    """Exhaustively: every n up to 300 and a few keys (cycle-walking lands every value inside)."""
    for n in range(0, 301):
        for key in (0, 1, derive_key(7, 3)):
            perm = KeyedPermutation(n, key)
            out = perm(np.arange(n))
            assert sorted(out.tolist()) == list(range(n)), f"n={n}, key={key}: not a permutation"
            assert perm.inverse(out).tolist() == list(range(n))


def test_the_permutation_at_a_billion_is_undone_by_its_inverse_on_samples():
    n = 10**9
    perm = KeyedPermutation(n, derive_key(123, 4))
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.integers(0, n, 200_000), [0, 1, n - 2, n - 1]])
    y = perm(x)
    assert y.min() >= 0 and y.max() < n
    assert (perm.inverse(y) == x).all()
    assert len(np.unique(y)) == len(np.unique(x))  # distinct positions, distinct samples
    # it shuffles: neighbours land far apart, about uniformly over [0, n)
    assert np.mean(np.abs(np.diff(perm(np.arange(10_000))))) > n / 10
    assert abs(np.mean(y) / n - 0.5) < 0.01


def test_keys_select_the_permutation_and_values_outside_are_refused():
    a = KeyedPermutation(1000, derive_key(1, 0))(np.arange(1000))
    assert (a == KeyedPermutation(1000, derive_key(1, 0))(np.arange(1000))).all()
    for other in (derive_key(1, 1), derive_key(2, 0), derive_key(-1, 0)):
        assert (a != KeyedPermutation(1000, other)(np.arange(1000))).mean() > 0.9
    with pytest.raises(ValueError, match=r"\[0, 1000\)"):
        KeyedPermutation(1000, 0)(np.array([1000]))


def keyed_full_order(n, seed, epoch):
    return KeyedPermutation(n, derive_key(seed, epoch))(np.arange(n))


GRID = list(itertools.product([1, 2, 7, 10, 33, 101], [1, 2, 3, 5, 8], [1, 3, 8], [False, True]))


@pytest.mark.parametrize("n,world,bs,drop_last", GRID)
def test_ranks_take_the_keyed_order_as_distributed_sampler_takes_its_own(n, world, bs, drop_last):
    """Same counts per rank, disjoint ranks (with drop_last), padding by repeating the order's
    start: the rank's samples are DistributedSampler's rule applied to the keyed order."""
    order = keyed_full_order(n, 9, 2)
    per_rank = sharding.samples_per_rank(n, world, drop_last)
    padded = sharding.pad_order(order, per_rank * world)
    parts = []
    for rank in range(world):
        batches = sharding.rank_batches(
            n, batch_size=bs, seed=9, epoch=2, world_size=world, rank=rank, drop_last=drop_last, order=KeyedOrder()
        )
        assert len(batches) == sharding.num_batches(n, batch_size=bs, world_size=world, drop_last=drop_last)
        flat = np.concatenate(list(batches)) if len(batches) else np.empty(0, np.int64)
        assert flat.tolist() == padded[rank::world].tolist()[: len(flat)]
        if drop_last:
            assert all(len(b) == bs for b in batches)
        parts.append(flat)
        for b in range(len(batches)):
            assert (batch_indices(n, 9, 2, world, rank, bs, b, drop_last) == batches[b]).all()
    allidx = np.concatenate(parts)
    if drop_last:
        assert len(np.unique(allidx)) == len(allidx)
    else:
        assert set(allidx.tolist()) == set(range(n)) and len(allidx) == per_rank * world


@pytest.mark.parametrize("n,world,drop_last", [(10, 3, False), (10, 3, True), (64, 4, False), (7, 8, False)])
def test_unshuffled_keyed_order_is_distributed_samplers_order(n, world, drop_last):
    for rank in range(world):
        want = sharding.rank_indices(n, world_size=world, rank=rank, shuffle=False, drop_last=drop_last)
        got = KeyedOrder().rank_indices(
            n, seed=0, epoch=0, world_size=world, rank=rank, shuffle=False, drop_last=drop_last
        )
        assert got.tolist() == want.tolist()


def test_a_batch_at_a_billion_samples_is_computed_without_the_epoch():
    """Batch b of rank 3 of 8 at n = 10^9: O(batch) work, and it agrees with the permutation."""
    n, world, rank, bs = 10**9, 8, 3, 64
    batches = KeyedOrder().rank_batches(
        n, batch_size=bs, seed=5, epoch=1, world_size=world, rank=rank, shuffle=True, drop_last=False
    )
    assert len(batches) == sharding.num_batches(n, batch_size=bs, world_size=world)
    last = batches[-1]
    assert len(last) == sharding.samples_per_rank(n, world, False) - (len(batches) - 1) * bs
    b = 1_000_000
    positions = rank + (b * bs + np.arange(bs)) * world
    assert (batches[b] == KeyedPermutation(n, derive_key(5, 1))(positions)).all()


@pytest.mark.parametrize("drop_last", [False, True])
def test_a_keyed_sampler_resumes_exactly_mid_epoch(drop_last):
    check_resume(
        lambda: DistributedBatchSampler(37, 4, seed=7, drop_last=drop_last, rank=1, world_size=2, order=KeyedOrder()),
        key=tuple,
    )


def test_a_keyed_shard_sampler_resumes_exactly_mid_epoch():
    check_resume(
        lambda: DistributedBatchSampler(sum(SIZES), 3, seed=2, rank=2, world_size=3, order=KeyedShardOrder(SIZES, 3)),
        key=tuple,
    )


def test_a_checkpoint_of_one_order_is_refused_by_the_other():
    keyed = DistributedBatchSampler(40, 4, order=KeyedOrder())
    plain = DistributedBatchSampler(40, 4)
    state = json.loads(json.dumps(keyed.state_dict()))
    assert state["order"] == "keyed"
    with pytest.raises(OrderMismatchError, match="order='keyed'.*order='randperm'"):
        plain.load_state_dict(state)
    old = plain.state_dict()
    del old["order"]  # a state saved before the setting existed: torch's order
    with pytest.raises(OrderMismatchError):
        keyed.load_state_dict(old)
    plain.load_state_dict(old)


def test_the_order_setting_is_checked_and_maps_source_orders():
    assert check_order("keyed", "x") == "keyed"
    with pytest.raises(ValueError, match="'randperm'.*'keyed'"):
        check_order("random", "HybridLoader")
    assert isinstance(keyed_order_for(None), KeyedOrder)
    shard = keyed_order_for(ShardOrder(SIZES, 3))
    assert isinstance(shard, KeyedShardOrder) and shard.buffer_shards == 3


SIZES = (7, 0, 5, 9, 3, 8, 6, 4, 10, 2, 0, 0, 1)  # empty shards and uneven ones
N = sum(SIZES)


def shard_of(sizes):
    return np.repeat(np.arange(len(sizes)), sizes)


def active_shards(order, sizes):
    """Per position of ``order``: how many shards have samples both at or before it and after it."""
    owner = shard_of(sizes)[order]
    first = {int(s): k for k, s in reversed(list(enumerate(owner)))}
    last = {int(s): k for k, s in enumerate(owner)}
    return [sum(first[s] <= k <= last[s] for s in first) for k in range(len(order))]


@pytest.mark.parametrize("buffer_shards", [1, 2, 3, 20])
def test_the_keyed_shard_order_is_a_permutation_whose_blocks_are_contiguous(buffer_shards):
    """The samples of each block of ``buffer_shards`` consecutive shards (in the epoch's shard
    order) fill one contiguous run of the order, so a reader holds at most that many shards."""
    order = KeyedShardOrder(SIZES, buffer_shards)
    for epoch in range(3):
        full = order.positions(np.arange(N), seed=4, epoch=epoch, shuffle=True)
        assert sorted(full.tolist()) == list(range(N))
        shards = order.shard_sequence(seed=4, epoch=epoch)
        assert sorted(shards.tolist()) == list(range(len(SIZES)))
        starts = np.concatenate([[0], np.cumsum(np.asarray(SIZES)[shards])])
        owner = shard_of(SIZES)[full]
        for b in range(0, len(SIZES), buffer_shards):
            lo, hi = starts[b], starts[min(b + buffer_shards, len(SIZES))]
            assert set(owner[lo:hi].tolist()) == {int(s) for s in shards[b : b + buffer_shards] if SIZES[s]}
        assert max(active_shards(full, SIZES)) <= buffer_shards
    assert (order.shard_sequence(seed=4, epoch=0) != order.shard_sequence(seed=4, epoch=1)).any()


@pytest.mark.parametrize(
    "world,drop_last,shuffle", list(itertools.product([1, 2, 3, 5, 7], [False, True], [False, True]))
)
def test_keyed_shard_ranks_get_contiguous_spans_as_the_shard_aware_order(world, drop_last, shuffle):
    keyed = KeyedShardOrder(SIZES, 3)
    full = keyed.positions(np.arange(N), seed=1, epoch=4, shuffle=shuffle)
    per_rank = sharding.samples_per_rank(N, world, drop_last)
    padded = sharding.pad_order(full, per_rank * world)
    for rank in range(world):
        got = keyed.rank_indices(N, seed=1, epoch=4, world_size=world, rank=rank, shuffle=shuffle, drop_last=drop_last)
        assert got.tolist() == padded[rank * per_rank : (rank + 1) * per_rank].tolist()
        plain = ShardOrder(SIZES, 3).rank_indices(
            N, seed=1, epoch=4, world_size=world, rank=rank, shuffle=shuffle, drop_last=drop_last
        )
        assert len(got) == len(plain)
        if not shuffle:
            assert got.tolist() == plain.tolist()


def test_keyed_shard_order_refuses_another_sources_size():
    with pytest.raises(ValueError, match=f"{N + 1} samples but the shards hold {N}"):
        KeyedShardOrder(SIZES, 2).rank_batches(
            N + 1, batch_size=4, seed=0, epoch=0, world_size=1, rank=0, shuffle=True, drop_last=False
        )


def test_the_keyed_streams_are_unchanged():
    """Recorded digests (as tests/test_stream_digests.py for the loader): a change to the keyed
    order changes every keyed checkpoint's stream, so it must be deliberate (update these)."""
    import hashlib

    def digest(a):
        return hashlib.sha256(np.asarray(a).astype("<i8").tobytes()).hexdigest()[:16]

    plain = KeyedOrder().rank_indices(10**5, seed=3, epoch=2, world_size=3, rank=1, shuffle=True, drop_last=False)
    sizes = list(SIZES) * 50
    shard = KeyedShardOrder(sizes, 3).rank_indices(
        sum(sizes), seed=3, epoch=2, world_size=3, rank=1, shuffle=True, drop_last=False
    )
    assert (digest(plain), digest(shard)) == ("d99f1036cece8152", "14b631cbce4f9400")
