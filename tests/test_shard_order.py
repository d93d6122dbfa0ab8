"""The shard-aware order (hybridload.sampling._shard_order): a pure function of (seed, epoch, rank) that
keeps each window of the order within a few shards and splits ranks as DistributedSampler
counts them."""

import itertools

import numpy as np
import pytest

from hybridload.sampling import sharding
from hybridload.sampling._sampler import DistributedBatchSampler
from hybridload.sampling._shard_order import ShardOrder, contiguous_rank_split, shard_block_order

SIZES = (7, 0, 5, 9, 3, 8, 6, 4, 10, 2)  # an empty shard and uneven ones
N = sum(SIZES)


def shard_of(sizes):
    return np.repeat(np.arange(len(sizes)), sizes)


def active_shards(order, sizes):
    """Per position of ``order``: how many shards have samples both at or before it and after it
    (the shards a reader must hold there)."""
    owner = shard_of(sizes)[order]
    first = {int(s): k for k, s in reversed(list(enumerate(owner)))}
    last = {int(s): k for k, s in enumerate(owner)}
    return [sum(first[s] <= k <= last[s] for s in first) for k in range(len(order))]


@pytest.mark.parametrize("buffer_shards", [1, 3, 4, 20])
def test_each_epoch_order_is_a_permutation_needing_at_most_buffer_shards_at_once(buffer_shards):
    for epoch in range(3):
        order = shard_block_order(SIZES, seed=11, epoch=epoch, buffer_shards=buffer_shards)
        assert sorted(order.tolist()) == list(range(N))
        active = active_shards(order, SIZES)
        assert max(active) <= buffer_shards
        if buffer_shards > 1:
            assert max(active) > 1  # samples of several shards are mixed


def test_the_order_is_a_pure_function_of_seed_and_epoch():
    a = shard_block_order(SIZES, seed=3, epoch=2, buffer_shards=3)
    assert a.tolist() == shard_block_order(SIZES, seed=3, epoch=2, buffer_shards=3).tolist()
    assert a.tolist() != shard_block_order(SIZES, seed=3, epoch=3, buffer_shards=3).tolist()
    assert a.tolist() != shard_block_order(SIZES, seed=4, epoch=2, buffer_shards=3).tolist()
    assert shard_block_order(SIZES, seed=3, epoch=2, buffer_shards=3, shuffle=False).tolist() == list(range(N))


def test_a_negative_seed_is_an_ordinary_key():
    order = shard_block_order(SIZES, seed=-5, epoch=0, buffer_shards=2)
    assert sorted(order.tolist()) == list(range(N))


@pytest.mark.parametrize(
    "world_size, drop_last, shuffle", list(itertools.product([1, 2, 3, 5, 7], [False, True], [False, True]))
)
def test_ranks_get_equal_counts_and_every_sample_once_as_distributed_sampler(world_size, drop_last, shuffle):
    order = ShardOrder(SIZES, buffer_shards=3)
    parts = [
        order.rank_indices(N, seed=1, epoch=4, world_size=world_size, rank=r, shuffle=shuffle, drop_last=drop_last)
        for r in range(world_size)
    ]
    default = [
        sharding.rank_indices(N, seed=1, epoch=4, world_size=world_size, rank=r, shuffle=shuffle, drop_last=drop_last)
        for r in range(world_size)
    ]
    assert [len(p) for p in parts] == [len(d) for d in default]
    flat = np.concatenate(parts).tolist()
    if drop_last:
        assert len(set(flat)) == len(flat)  # nothing twice; the tail dropped
    else:
        assert set(flat) == set(range(N))  # everything; padding repeats the start
        assert len(flat) - len(set(flat)) == (-N) % world_size


def test_ranks_take_contiguous_spans_of_the_epoch_order():
    full = shard_block_order(SIZES, seed=2, epoch=1, buffer_shards=2)
    parts = [contiguous_rank_split(full, world_size=4, rank=r, drop_last=True) for r in range(4)]
    assert np.concatenate(parts).tolist() == full[: len(full) // 4 * 4].tolist()


def test_the_module_docstring_example_holds():
    order = ShardOrder((3, 3, 2), buffer_shards=2)
    got = [
        order.rank_indices(8, seed=0, epoch=0, world_size=3, rank=r, shuffle=False, drop_last=False).tolist()
        for r in range(3)
    ]
    assert got == [[0, 1, 2], [3, 4, 5], [6, 7, 0]]
    dropped = [
        order.rank_indices(8, seed=0, epoch=0, world_size=3, rank=r, shuffle=False, drop_last=True).tolist()
        for r in range(3)
    ]
    assert dropped == [[0, 1], [2, 3], [4, 5]]


def test_rank_batches_and_the_sampler_follow_a_given_order():
    order = ShardOrder(SIZES, buffer_shards=2)
    batches = sharding.rank_batches(N, batch_size=4, seed=5, epoch=1, world_size=2, rank=1, order=order)
    want = order.rank_indices(N, seed=5, epoch=1, world_size=2, rank=1, shuffle=True, drop_last=False)
    assert np.concatenate(batches).tolist() == want.tolist()
    assert len(batches) == sharding.num_batches(N, batch_size=4, world_size=2)
    sampler = DistributedBatchSampler(N, 4, seed=5, rank=1, world_size=2, order=order)
    sampler.set_epoch(1)
    assert [b for b in sampler] == [b.tolist() for b in batches]


def test_bad_arguments_say_what_to_write():
    with pytest.raises(ValueError, match="buffer_shards must be an int >= 1.*buffer_shards=4"):
        ShardOrder((3, 3), buffer_shards=0)
    with pytest.raises(ValueError, match="dataset has 5 samples but the shards hold 6"):
        ShardOrder((3, 3)).rank_indices(5, seed=0, epoch=0, world_size=1, rank=0, shuffle=True, drop_last=False)
