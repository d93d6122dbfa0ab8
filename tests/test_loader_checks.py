"""HybridLoader's argument and saved-state checks: each bad value is refused naming the field."""

import math

import pytest
import torch

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload._loader_checks import check_epoch, check_seed
from hybridload.sampling._pass_state import PassState
from hybridload.sampling.sharding import resolve_rank

REC = recipe.imagenet_train(32)
MINE = {"seed": 0, "shuffle": True, "drop_last": False, "batch_size": 8, "world_size": 1, "rank": 0, "num_samples": 60}


def good_state(**kw):
    s = dict(MINE, version=1, epoch=2, position=3)
    s.update(kw)
    return s


def mine():
    """A pass of MINE's loader: 60 samples in batches of 8, one rank (8 batches an epoch)."""
    return PassState(60, 8, seed=0, shuffle=True, drop_last=False, rank=0, world_size=1)


def test_a_good_state_resumes_its_epoch_and_position():
    for position in (3, 8):
        ps = mine()
        ps.reset(good_state(position=position), "HybridLoader.load_state_dict")
        assert (ps.epoch, ps.begin().start) == (2, position)


@pytest.mark.parametrize(
    "state, field",
    [
        (None, "state must be the dict"),
        ([1], "state must be the dict"),
        ({k: v for k, v in good_state().items() if k != "position"}, "lacks position"),
        (good_state(position=-3), "position must be in \\[0, 8\\]"),
        (good_state(position=999), "position must be in \\[0, 8\\]"),
        (good_state(position=2.0), "position must be an int"),
        (good_state(epoch=-1), "epoch must be an int >= 0"),
        (good_state(epoch="1"), "epoch must be an int"),
        (good_state(epoch=2**70), "field 'epoch': epoch must be below 2\\*\\*63"),
        (good_state(shuffle=1), "shuffle must be a bool"),
        (good_state(version=7), "version 7"),
        (good_state(seed=5), "saved with seed=5"),
    ],
)
def test_a_state_with_a_bad_field_is_refused_naming_it_and_changes_nothing(state, field):
    ps = mine()
    before = ps.get_state()
    with pytest.raises((TypeError, ValueError), match=field):
        ps.reset(state, "HybridLoader.load_state_dict")
    assert ps.get_state() == before


@pytest.mark.parametrize(
    "field, value",
    [("batch_size", 0), ("batch_size", 2**63), ("world_size", 0), ("rank", 1), ("rank", -1), ("num_samples", -1)],
)
def test_a_state_field_out_of_range_is_blamed_on_the_state_naming_its_key(field, value):
    """``batch_size must be a positive int, got 0`` named neither the state nor its key before."""
    ps = mine()
    before = ps.get_state()
    with pytest.raises(ValueError) as info:
        ps.reset(good_state(**{field: value}), "HybridLoader.load_state_dict")
    words = str(info.value)
    assert words.startswith(f"HybridLoader.load_state_dict: the state's field {field!r} is {value!r}"), words
    assert "the state, not this HybridLoader, holds the bad value" in words and "unchanged" in words
    assert ps.get_state() == before


def test_loader_load_state_dict_refuses_out_of_range_position_and_keeps_its_state(photo_root):
    with HybridLoader(sources.ImageFolder(photo_root), REC, 8, policy=LoaderPolicy(cpu_actors=0)) as ld:
        state = ld.state_dict()
        for bad in (-3, 999):
            with pytest.raises(ValueError, match="position"):
                ld.load_state_dict(dict(state, position=bad))
        with pytest.raises(TypeError, match="state"):
            ld.load_state_dict(None)
        assert ld.state_dict() == state
        assert len(list(ld)) == len(ld)


def test_negative_epoch_is_refused_with_a_message_and_the_loader_still_works(photo_root):
    with HybridLoader(sources.ImageFolder(photo_root), REC, 16, policy=LoaderPolicy(cpu_actors=0)) as ld:
        with pytest.raises(ValueError, match="epoch must be an int >= 0"):
            ld.set_epoch(-1)
        with pytest.raises(TypeError, match="epoch must be an int"):
            ld.set_epoch(1.5)
        assert len(list(ld)) == len(ld)
    assert check_epoch(3) == 3


def test_an_epoch_beyond_what_the_seed_takes_is_refused_naming_it_and_the_largest_one_runs(photo_root):
    """set_epoch(2**64+5) once passed and the pass died in manual_seed naming nothing."""
    with HybridLoader(
        sources.ImageFolder(photo_root),
        REC,
        16,
        seed=2**63 - 1,
        policy=LoaderPolicy(cpu_actors=0, local_workers="threads"),
    ) as ld:
        for bad in (2**64 + 5, 2**63):
            with pytest.raises(ValueError, match="HybridLoader.set_epoch: epoch must be below 2\\*\\*63"):
                ld.set_epoch(bad)
        with pytest.raises(ValueError, match="field 'epoch'"):
            ld.load_state_dict(dict(ld.state_dict(), epoch=2**70))
        ld.set_epoch(2**63 - 1)  # the largest epoch, with the largest seed: its pass and the next one run
        assert len(list(ld)) == len(ld) and len(list(ld)) == len(ld)


def test_a_seed_beyond_64_bits_is_refused_with_a_message():
    with pytest.raises(ValueError, match="seed must fit in 64 bits"):
        check_seed(2**70)
    assert check_seed(2**63 - 1) == 2**63 - 1
    with pytest.raises(TypeError, match="seed must be an int"):
        check_seed(1.0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_device_without_cuda_is_refused_with_a_message(photo_root):
    with pytest.raises(ValueError, match="sees no CUDA device"):
        HybridLoader(sources.ImageFolder(photo_root), REC, 8, policy=LoaderPolicy(cpu_actors=0), device="cuda")


@pytest.mark.parametrize(
    "rank, world, name",
    [(True, 2, "rank"), (0, 2.7, "world_size"), (-1, 2, "rank"), (0, 0, "world_size"), (0, math.nan, "world_size")],
)
def test_resolve_rank_refuses_bools_floats_and_out_of_range(rank, world, name):
    with pytest.raises(ValueError, match=f"{name} must be None or an int"):
        resolve_rank(rank, world)


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(batch_timeout_s=math.nan), "batch_timeout_s"),
        (dict(batch_timeout_s=math.inf), "batch_timeout_s"),
        (dict(batch_timeout_s=True), "batch_timeout_s"),
        (dict(straggler_min_s="x"), "straggler_min_s"),
        (dict(straggler_min_s=math.nan), "straggler_min_s"),
        (dict(ship_bytes="no"), "ship_bytes"),
        (dict(straggler_factor=math.inf), "straggler_factor"),
    ],
)
def test_policy_refuses_nan_inf_strings_and_non_bools_naming_the_field(kw, field):
    with pytest.raises(ValueError, match=f"LoaderPolicy: {field} must be"):
        LoaderPolicy(**kw)


def test_a_plan_asking_more_threads_than_cpus_runs_what_fits_with_a_warning():
    from hybridload.planner._plan import Plan
    from hybridload._policy import usable_cpus

    with pytest.warns(UserWarning, match="asks for 400 local threads"):
        policy = LoaderPolicy.from_plan(Plan(gpu_share=0.0, cpu_actors={}, local_threads=400))
    assert policy.threads == usable_cpus()
