import itertools

import numpy as np
import pytest
from torch.utils.data import DistributedSampler

from hybridload.errors import OrderMismatchError
from hybridload.sampling import sharding
from hybridload.sampling._sampler import DistributedBatchSampler

from support.resume_helper import check_resume

GRID = list(itertools.product([1, 7, 10, 33, 64, 101], [1, 2, 3, 4, 5, 8], [1, 3, 8], [False, True]))


@pytest.mark.parametrize("n,world,bs,drop_last", GRID)
def test_rank_batches_partition_the_dataset(n, world, bs, drop_last):
    per_rank = [
        sharding.rank_batches(n, batch_size=bs, seed=3, epoch=1, world_size=world, rank=r, drop_last=drop_last)
        for r in range(world)
    ]
    counts = {len(b) for b in per_rank}
    assert len(counts) == 1, "every rank must get the same number of batches"
    assert counts.pop() == sharding.num_batches(n, batch_size=bs, world_size=world, drop_last=drop_last)
    flat = [np.concatenate(b) if b else np.empty(0, np.int64) for b in per_rank]
    allidx = np.concatenate(flat)
    assert allidx.min(initial=0) >= 0 and allidx.max(initial=0) < max(n, 1)
    if drop_last:
        # disjoint, nothing repeated; at most world_size * bs samples left out
        assert len(np.unique(allidx)) == len(allidx)
        assert n - len(allidx) < world + world * bs
    else:
        # every index covered; repeats only from DistributedSampler-style padding
        assert set(allidx.tolist()) == set(range(n))
        padded = sharding.samples_per_rank(n, world, False) * world
        assert len(allidx) == padded and padded - n < world
    for b in per_rank:
        for batch in b[:-1]:
            assert len(batch) == bs


@pytest.mark.parametrize("n,world,drop_last", [(10, 3, False), (10, 3, True), (64, 4, False), (7, 8, False)])
def test_rank_indices_match_torch_distributed_sampler(n, world, drop_last):
    for rank in range(world):
        ds = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=5, drop_last=drop_last)
        ds.set_epoch(2)
        ours = sharding.rank_indices(n, seed=5, epoch=2, world_size=world, rank=rank, drop_last=drop_last)
        assert ours.tolist() == list(ds)


def test_same_seed_epoch_same_order_and_epochs_differ():
    a = sharding.rank_batches(100, batch_size=8, seed=1, epoch=0)
    b = sharding.rank_batches(100, batch_size=8, seed=1, epoch=0)
    c = sharding.rank_batches(100, batch_size=8, seed=1, epoch=1)
    assert all((x == y).all() for x, y in zip(a, b))
    assert not all((x == y).all() for x, y in zip(a, c))
    unshuffled = sharding.rank_batches(10, batch_size=4, shuffle=False)
    assert np.concatenate(unshuffled).tolist() == list(range(10))


@pytest.mark.parametrize(
    "kwargs,msg",
    [
        (dict(batch_size=0), "batch_size"),
        (dict(batch_size=-2), "batch_size"),
        (dict(batch_size=2, world_size=0), "world_size"),
        (dict(batch_size=2, world_size=2, rank=2), "rank"),
        (dict(batch_size=2**63), "batch_size must be at most 2\\*\\*63 - 1"),  # OverflowError in shared_memory before
    ],
)
def test_bad_arguments_name_the_argument(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        sharding.rank_batches(10, **kwargs)


def test_resolve_rank_defaults_and_overrides(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert sharding.resolve_rank() == (0, 1)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert sharding.resolve_rank() == (2, 4)
    assert sharding.resolve_rank(1, 3) == (1, 3)


@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_batch_sampler_resume(drop_last):
    check_resume(lambda: DistributedBatchSampler(37, 4, seed=7, drop_last=drop_last, rank=1, world_size=2), key=tuple)


def _pass(sampler):
    return [tuple(b) for b in sampler]


def test_a_pass_without_set_epoch_advances_the_epoch():
    s = DistributedBatchSampler(40, 4, seed=3)
    first, second = _pass(s), _pass(s)
    assert first != second and s.epoch == 1
    assert second == [tuple(b.tolist()) for b in s.batches(1)]


def test_set_epoch_always_wins_over_the_pass_count():
    s = DistributedBatchSampler(40, 4, seed=3)
    s.set_epoch(5)
    five = _pass(s)
    assert _pass(s) != five and s.epoch == 6  # no set_epoch: epoch 6
    s.set_epoch(5)
    s.set_epoch(5)
    assert _pass(s) == five and s.epoch == 5


def test_a_resumed_pass_continues_its_epoch_even_when_set_epoch_names_it():
    s = DistributedBatchSampler(40, 4, seed=3)
    s.set_epoch(2)
    whole = _pass(s)
    sd = s.state_dict()
    sd["position"] = 4
    r = DistributedBatchSampler(40, 4, seed=3)
    _pass(r)  # a pass before the resume does not move the resumed epoch
    r.load_state_dict(sd)
    r.set_epoch(2)
    assert _pass(r) == whole[4:] and r.epoch == 2
    assert _pass(r) == [tuple(b.tolist()) for b in r.batches(3)]
    assert len(r) == len(whole)


def test_the_sampler_takes_the_order_names_order_mismatch_error_tells_a_user_to_build():
    """OrderMismatchError says "build it with order='keyed'": the sampler takes that string, resumes the
    keyed state, and gives the keyed order's batches (it raised AttributeError on iteration before)."""
    saved = DistributedBatchSampler(40, 4, seed=3, rank=0, world_size=1, order="keyed")
    whole = _pass(saved)
    sd = dict(saved.state_dict(), position=3)
    assert sd["order"] == "keyed"
    resumed = DistributedBatchSampler(40, 4, seed=3, rank=0, world_size=1, order="keyed")
    resumed.load_state_dict(sd)
    assert _pass(resumed) == whole[3:]
    plain = DistributedBatchSampler(40, 4, seed=3, rank=0, world_size=1, order="randperm")
    assert _pass(plain) == _pass(DistributedBatchSampler(40, 4, seed=3, rank=0, world_size=1)) != whole
    with pytest.raises(OrderMismatchError, match="order='keyed'"):
        plain.load_state_dict(sd)
    with pytest.raises(ValueError, match="order must be 'randperm' .* or 'keyed'"):
        DistributedBatchSampler(40, 4, rank=0, world_size=1, order="Keyed")


@pytest.mark.parametrize("epoch, error", [(2**64, ValueError), (-1, ValueError), (1.5, TypeError)])
def test_sampler_set_epoch_is_checked_as_hybridloaders(epoch, error):
    s = DistributedBatchSampler(40, 4, seed=3, rank=0, world_size=1)
    with pytest.raises(error, match="DistributedBatchSampler.set_epoch: epoch must be"):
        s.set_epoch(epoch)  # 2**64: torch's "Overflow when unpacking long long" at iteration before
    s.set_epoch(2**63 - 1)
    assert len(_pass(s)) == 10


def test_a_batch_size_as_large_as_python_takes_gives_one_batch_of_all():
    with pytest.raises(ValueError, match="DistributedBatchSampler: batch_size must be at most"):
        DistributedBatchSampler(10, 2**63, rank=0, world_size=1)
    s = DistributedBatchSampler(10, 2**63 - 1, rank=0, world_size=1, shuffle=False)
    assert _pass(s) == [tuple(range(10))]
