"""The elastic-resume plan (sampling.resume), exhaustively on small datasets: what a state saved
after k batches at world size W leaves, split among W' ranks at batch size B', is the epoch's
global order minus what was delivered, in the same order, each sample once plus the
documented padding (or minus the documented dropped tail), every rank the same number of
batches; a fresh plan is exactly the stream's own order."""

import itertools

import pytest

from hybridload.errors import ResumeMismatchError
from hybridload.sampling import _resume as resume, sharding
from hybridload.sampling._keyed_order import KeyedOrder
from hybridload.sampling._keyed_shard_order import KeyedShardOrder
from hybridload.sampling._shard_order import ShardOrder
from hybridload.sampling._sampler import DistributedBatchSampler


def plan_slots(n, remaining, *, world_size, batch_size, drop_last, split):
    """Each rank's batches of global positions (shuffle=False: a position is its sample); the
    contiguous split is the shard-aware order's (one shard)."""
    order = None if split == "strided" else ShardOrder((n,))
    return [
        [
            b.tolist()
            for b in resume.plan_rank_batches(
                remaining,
                order,
                n,
                batch_size=batch_size,
                seed=0,
                epoch=0,
                world_size=world_size,
                rank=r,
                shuffle=False,
                drop_last=drop_last,
            )
        ]
        for r in range(world_size)
    ]


def delivered(batches, k):
    return [i for rank in batches for b in rank[:k] for i in b]


@pytest.mark.parametrize("split", resume.SPLITS)
@pytest.mark.parametrize("drop_last", (False, True))
def test_before_and_after_a_resume_at_any_world_size_cover_the_epoch_once_in_global_order(split, drop_last):
    for n, w, b in itertools.product(range(0, 11), range(1, 5), (1, 2, 3)):
        first = resume.whole(n)
        before = plan_slots(n, first, world_size=w, batch_size=b, drop_last=drop_last, split=split)
        count = resume.plan_batches(first, batch_size=b, world_size=w, drop_last=drop_last)
        assert {len(r) for r in before} <= {count}
        for k in range(count + 1):
            left = resume.remaining_after(first, k, batch_size=b, world_size=w, drop_last=drop_last, split=split)
            got = delivered(before, k)
            own = _own_slots(n, w, b, k, drop_last, split)  # positions delivered in their own place
            # what is left is the global order (0..n-1 here) minus what was delivered, in order
            want_left = [] if k == count else [p for p in range(n) if p not in own]
            assert [p for a, z in left for p in range(a, z)] == want_left, (n, w, b, k)
            for w2, b2 in itertools.product(range(1, 5), (1, 2)):
                after = plan_slots(n, left, world_size=w2, batch_size=b2, drop_last=drop_last, split=split)
                count2 = resume.plan_batches(left, batch_size=b2, world_size=w2, drop_last=drop_last)
                assert all(len(r) == count2 for r in after)  # every rank the same number of batches
                seen = got + delivered(after, count2)
                length = len(want_left)
                per2 = sharding.samples_per_rank(length, w2, drop_last)
                if not drop_last:
                    assert _read(after, split)[:length] == want_left  # the same global order
                    assert set(seen) == set(range(n))
                    pad_before = len(got) - len(own)
                    assert len(seen) - n == pad_before + per2 * w2 - length  # the documented padding only
                else:
                    assert len(seen) == len(set(seen))  # nothing twice
                    if k < count:
                        assert n - len(seen) == length - count2 * b2 * w2  # the documented dropped tail only


def _read(batches, split):
    """A plan's samples in slot order: strided, rank after rank for each sample; contiguous, rank by rank."""
    per_rank = [[i for b in rank for i in b] for rank in batches]
    if split == "contiguous":
        return [i for rank in per_rank for i in rank]
    return [rank[j] for j in range(max(map(len, per_rank), default=0)) for rank in per_rank if j < len(rank)]


def _own_slots(n, w, b, k, drop_last, split):
    """Brute force: the positions of [0, n) delivered in their own slot after k batches per rank."""
    per = sharding.samples_per_rank(n, w, drop_last)
    m = min(k * b, per)
    slots = [r + j * w if split == "strided" else r * per + j for r in range(w) for j in range(m)]
    return {q for q in slots if q < n}


def test_a_plan_resumed_twice_still_covers_the_epoch_once():
    n = 29
    for split, (w1, w2, w3) in itertools.product(resume.SPLITS, [(2, 3, 1), (2, 4, 2), (3, 1, 4)]):
        plan, seen = resume.whole(n), []
        for w, k in ((w1, 2), (w2, 1), (w3, None)):
            batches = plan_slots(n, plan, world_size=w, batch_size=2, drop_last=False, split=split)
            k = len(batches[0]) if k is None else k
            seen += delivered(batches, k)
            plan = resume.remaining_after(plan, k, batch_size=2, world_size=w, drop_last=False, split=split)
        assert plan == () and set(seen) == set(range(n))
        assert len(seen) - n <= (w1 - 1) + (w2 - 1) + (w3 - 1)  # at most one short round of padding per plan


@pytest.mark.parametrize(
    "order",
    [None, KeyedOrder(), ShardOrder((4, 7, 3, 5)), KeyedShardOrder((4, 7, 3, 5), 2)],
    ids=["randperm", "keyed", "shard", "keyed-shard"],
)
def test_a_fresh_plan_is_exactly_the_streams_own_order(order):
    """The plan's position lookup and split reproduce every order's own batches, so a resumed
    plan continues the same global order."""
    n = 19
    for w, b, dl, epoch in itertools.product((1, 2, 3, 4), (1, 3), (False, True), (0, 5)):
        for r in range(w):
            want = sharding.rank_batches(
                n, batch_size=b, seed=3, epoch=epoch, world_size=w, rank=r, drop_last=dl, order=order
            )
            got = resume.plan_rank_batches(
                resume.whole(n),
                order,
                n,
                batch_size=b,
                seed=3,
                epoch=epoch,
                world_size=w,
                rank=r,
                shuffle=True,
                drop_last=dl,
            )
            assert [x.tolist() for x in got] == [x.tolist() for x in want]


def test_the_sampler_resumes_any_ranks_state_at_another_world_size_and_refuses_another_seed():
    n, seen = 23, []
    saver = [DistributedBatchSampler(n, 3, seed=5, rank=r, world_size=2) for r in range(2)]
    for s in saver:
        s.set_epoch(4)
        it = iter(s)
        seen += [i for _ in range(2) for i in next(it)]
    state = saver[0].state_dict()
    assert state["delivered"] == 12 and state["remaining"] is None
    for w in (1, 3, 4):
        again = list(seen)
        for r in range(w):
            s = DistributedBatchSampler(n, 2, seed=5, rank=r, world_size=w)
            s.load_state_dict(state)
            s.set_epoch(4)  # the usual loop: keeps the resumed place
            again += [i for b in s for i in b]
        assert set(again) == set(range(n)) and len(again) - n < w
    with pytest.raises(ResumeMismatchError, match="seed=5 but this one has seed=6"):
        DistributedBatchSampler(n, 3, seed=6, rank=0, world_size=2).load_state_dict(state)
    with pytest.raises(ResumeMismatchError, match="num_samples=23"):  # one name for the size, as HybridLoader's
        DistributedBatchSampler(n + 1, 3, seed=5, rank=0, world_size=2).load_state_dict(state)


def test_common_position_takes_the_smallest_and_bad_remaining_is_refused():
    a = {"epoch": 1, "world_size": 2, "batch_size": 4, "seed": 0, "remaining": None, "position": 3}
    assert resume.common_position([a, dict(a, position=2)])["position"] == 2
    with pytest.raises(ValueError, match="differ in epoch"):
        resume.common_position([a, dict(a, epoch=2)])
    with pytest.raises(ValueError, match="increasing, disjoint"):
        resume.check_remaining([[5, 3]], 10, "here")
    with pytest.raises(ValueError, match=r"position must be in \[0, 3\]"):
        resume.resume_plan(
            dict(a, position=9), n=20, world_size=3, batch_size=4, drop_last=False, split="strided", where="here"
        )


def test_a_state_of_other_shards_or_another_split_is_refused():
    state = DistributedBatchSampler(19, 2, order=ShardOrder((4, 7, 3, 5), 2)).state_dict()
    assert state["split"] == "contiguous" and "4 shards" in state["shards"]
    with pytest.raises(ResumeMismatchError, match="shards="):
        DistributedBatchSampler(19, 2, order=ShardOrder((5, 6, 3, 5), 2)).load_state_dict(state)
    with pytest.raises(ResumeMismatchError, match="split='contiguous' but this one has split='strided'"):
        DistributedBatchSampler(19, 2).load_state_dict(state)
    DistributedBatchSampler(19, 3, order=ShardOrder((4, 7, 3, 5), 2), rank=1, world_size=2).load_state_dict(state)
