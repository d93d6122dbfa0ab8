"""``even_batches=False`` (`hybridload.sampling._uneven`): each sample once across the ranks, no
padding, for every order and split; uneven batch counts; refused with drop_last=True."""

from __future__ import annotations

import numpy as np
import pytest

from hybridload.sampling._keyed_order import KeyedOrder
from hybridload.sampling._keyed_shard_order import KeyedShardOrder
from hybridload.sampling._sampler import DistributedBatchSampler
from hybridload.sampling._uneven import real_samples


def sampler(n, bs, world, rank, **kw):
    return DistributedBatchSampler(n, bs, seed=4, rank=rank, world_size=world, even_batches=False, **kw)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("order", [None, KeyedOrder(), KeyedShardOrder([10, 13, 8, 16], 2)])
def test_without_even_batches_every_sample_comes_once_across_the_ranks(world, order):
    n, bs = 47, 4
    got, counts = [], []
    for r in range(world):
        s = sampler(n, bs, world, r, order=order)
        mine = [b for b in s]
        assert len(mine) == len(s) == s.epoch_batches()
        counts.append(len(mine))
        got += [i for b in mine for i in b]
    assert sorted(got) == list(range(n))
    even = DistributedBatchSampler(n, bs, seed=4, rank=0, world_size=world, order=order)
    assert max(counts) == even.epoch_batches()  # the padded split's count is the most any rank gets


def test_without_even_batches_a_rank_keeps_its_padded_split_minus_the_padding():
    for r in range(3):
        even = DistributedBatchSampler(10, 2, shuffle=False, rank=r, world_size=3)
        cut = sampler(10, 2, 3, r, shuffle=False)
        flat_even = [i for b in even for i in b]
        assert [i for b in cut for i in b] == flat_even[: real_samples(10, world_size=3, rank=r, split="strided")]
    assert [len(sampler(10, 2, 3, r, shuffle=False)) for r in range(3)] == [2, 2, 2]
    assert [len(sampler(10, 3, 3, r, shuffle=False)) for r in range(3)] == [2, 1, 1]


def test_without_even_batches_a_resumed_epoch_still_comes_once():
    n, bs = 47, 4
    head, state = [], None
    for r in range(2):
        s = sampler(n, bs, 2, r, order=KeyedOrder())
        it = iter(s)
        head += [i for _ in range(3) for i in next(it)]
        state = s.state_dict()
    rest = []
    for r in range(3):
        s = sampler(n, 5, 3, r, order=KeyedOrder())
        s.load_state_dict(state)
        rest += [i for b in s for i in b]
    assert sorted(head + rest) == list(range(n))


def test_even_batches_false_is_refused_with_drop_last_and_must_be_a_bool():
    with pytest.raises(ValueError, match="pass drop_last=False with even_batches=False"):
        DistributedBatchSampler(10, 2, rank=0, world_size=2, drop_last=True, even_batches=False)
    with pytest.raises(ValueError, match="even_batches must be True or False"):
        DistributedBatchSampler(10, 2, rank=0, world_size=2, even_batches=np.bool_(False))
