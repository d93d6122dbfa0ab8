"""PassState, the one owner of where a pass is and of its saved state (pure logic, no loader):
the position moves once per delivered batch of the live pass only, the epoch follows the
documented rules across passes, a state round-trips through JSON in one format for the sampler,
HybridLoader and the drop-in, and states saved in the format before it still load."""

import json

import pytest

from hybridload.errors import OrderMismatchError, ResumeMismatchError
from hybridload.sampling import DistributedBatchSampler
from hybridload.sampling._pass_state import STATE_FIELDS, PassState, check_state, upgraded

WHERE = "test"


def make(n=23, batch=3, rank=0, world=2, **kw):
    return PassState(n, batch, seed=kw.pop("seed", 5), shuffle=True, drop_last=False, rank=rank, world_size=world, **kw)


def test_the_position_moves_once_per_delivered_batch_of_the_live_pass_only():
    ps = make()
    old = ps.begin()
    assert (old.start, old.epoch, ps.position) == (0, 0, 0)
    assert (old.deliver(), old.deliver()) == (0, 1)  # each batch's place in the epoch
    assert ps.position == 2
    new = ps.begin()  # a new pass (the next epoch): the older pass's handle no longer counts
    assert old.deliver() is None and old.delivered == 2
    assert (ps.epoch, ps.position, new.deliver(), ps.position) == (1, 0, 0, 1)
    ps.reset(make().get_state(), WHERE)  # a load supersedes the live pass too
    assert new.deliver() is None and ps.position == 0


def test_a_superseded_pass_says_by_what_and_the_next_pass_starts_where_the_state_says():
    ps = make()
    first = ps.begin(why="the first iter()")
    first.deliver()
    second = ps.begin(why="iter() on another thread")
    assert first.superseded_by == "pass 2 (iter() on another thread)" and second.superseded_by is None
    assert second.deliver() == 0 and first.deliver() is None and ps.position == 1
    saved = make().get_state(position=3)  # epoch 0, three batches delivered
    ps.reset(saved, WHERE)
    assert second.superseded_by == "load_state_dict()" and second.deliver() is None
    assert (ps.epoch, ps.position) == (0, 3)  # the state the load left, before any pass begins
    third = ps.begin()
    assert (third.id, third.epoch, third.start, ps.position) == (3, 0, 3, 3)
    ps.begin().deliver()  # no set_epoch or load since: the next epoch from its start
    assert (third.superseded_by, ps.epoch, ps.position) == ("pass 4", 1, 1)


def test_epochs_across_passes_advance_set_epoch_wins_and_a_resume_continues_its_epoch():
    ps = make()
    assert [(ps.begin().start, ps.epoch) for _ in range(3)] == [(0, 0), (0, 1), (0, 2)]
    ps.set_epoch(7)
    ps.begin()
    ps.set_epoch(7)
    assert (ps.begin().start, ps.epoch) == (0, 7)  # set_epoch(e) before each pass gives e each time
    ps.resume_at(4, 3)
    ps.set_epoch(4)  # naming the resumed epoch keeps its place
    assert (ps.begin().start, ps.epoch) == (3, 4)
    ps.resume_at(4, 3)
    ps.set_epoch(5)  # another epoch starts afresh
    assert (ps.begin().start, ps.epoch) == (0, 5)


def test_a_state_round_trips_through_json_and_holds_every_field():
    a = make(rank=1)
    a.set_epoch(4)
    p = a.begin()
    p.deliver()
    p.deliver()
    state = json.loads(json.dumps(a.get_state()))
    assert set(STATE_FIELDS) <= set(state) and {"order", "source", "remaining", "delivered"} <= set(state)
    assert state["delivered"] == 12 and state["num_samples"] == 23 and "n" not in state
    b = make(rank=0, world=2)
    b.reset(state, WHERE)
    assert (b.epoch, b.begin().start) == (4, 2)
    assert b.get_state(position=2) == dict(state, rank=0)


def test_the_sampler_and_hybridloader_save_one_format(photo_root):
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources

    src = sources.ImageFolder(photo_root)
    with HybridLoader(src, recipe.imagenet_eval(32), 4, policy=LoaderPolicy(cpu_actors=0), seed=3) as ld:
        loader_state = ld.state_dict()
    sampler_state = DistributedBatchSampler(len(src), 4, seed=3).state_dict()
    assert set(loader_state) == set(sampler_state)
    assert dict(loader_state, source=None) == sampler_state  # the sampler knows no source: its "source" is None


def test_a_sampler_state_of_the_format_before_loads_and_resumes_the_same_batches():
    """Saved by the DistributedBatchSampler before the one format: the size as ``n``, no version."""
    saved = {
        "epoch": 4,
        "position": 2,
        "seed": 5,
        "n": 23,
        "world_size": 2,
        "rank": 1,
        "batch_size": 3,
        "shuffle": True,
        "drop_last": False,
        "order": "randperm",
        "remaining": None,
        "delivered": 12,
        "split": "strided",
        "shards": None,
    }
    s = DistributedBatchSampler(23, 3, seed=5, rank=1, world_size=2)
    s.load_state_dict(saved)
    s.set_epoch(4)
    assert [b for b in s] == [[4, 1, 3], [7, 18, 12]]  # what that version yielded after its second batch
    assert upgraded(saved)["num_samples"] == 23 and check_state(saved, WHERE)["version"] == 1
    with pytest.raises(ResumeMismatchError, match="num_samples=23 but this one has num_samples=24"):
        DistributedBatchSampler(24, 3, seed=5).load_state_dict(saved)


def test_a_sampler_state_of_shards_before_the_one_format_loads():
    from hybridload.sampling._shard_order import ShardOrder

    saved = {
        "epoch": 0,
        "position": 1,
        "seed": 1,
        "n": 19,
        "world_size": 1,
        "rank": 0,
        "batch_size": 2,
        "shuffle": True,
        "drop_last": False,
        "order": "randperm",
        "remaining": None,
        "delivered": 2,
        "split": "contiguous",
        "shards": "4 shards (sizes crc32 38b0c266), buffer_shards=2",
    }
    s = DistributedBatchSampler(19, 2, order=ShardOrder((4, 7, 3, 5), 2), seed=1)
    s.load_state_dict(saved)
    assert s.state_dict()["shards"] == saved["shards"] and len(s) == 9


@pytest.mark.parametrize(
    "field, value, error",
    [
        ("seed", 6, ResumeMismatchError),
        ("num_samples", 24, ResumeMismatchError),
        ("shuffle", False, ResumeMismatchError),
        ("drop_last", True, ResumeMismatchError),
        ("order", "keyed", OrderMismatchError),
        ("source", "other shards", ResumeMismatchError),
    ],
)
def test_a_state_of_another_dataset_seed_order_or_setting_is_refused_naming_the_field(field, value, error):
    ps = make(fingerprint=lambda: "these shards")
    state = dict(ps.get_state(), **{field: value})
    with pytest.raises(error, match=f"{field}="):
        make(fingerprint=lambda: "these shards").reset(state, WHERE)
    make().reset(dict(state, source=None) if field == "source" else make().get_state(), WHERE)


def test_rank_world_size_and_batch_size_may_differ():
    state = make(batch=3, rank=1, world=2).get_state()
    for world, batch in ((1, 2), (4, 1)):
        ps = make(batch=batch, rank=0, world=world)
        ps.reset(state, WHERE)
        assert ps.begin().start == 0
