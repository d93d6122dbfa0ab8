"""An actor pool's settings are one frozen `PoolConfig` (with its `PlacementRules`), checked
when made: a bad value is refused with a message naming the field and what to write, before
any Ray connection or actor; what a pool is (its worker's index, a count taken as a request)
stays with the pool's class."""

import math

import pytest

from hybridload.raycluster import PlacementRules
from hybridload._dataloader.pools import DatasetLane, IterableDatasetActors
from hybridload.lanes._ray import ActorPool, PoolConfig, RayLane
from hybridload.lanes._ray.pool_config import start_timeout_seconds


RULES = PlacementRules(reserve_local_cpus=0)


def test_a_pool_config_holds_the_pools_settings_with_the_defaults_the_pool_had():
    config = PoolConfig(rules=RULES, on_no_actors="raise")
    assert (
        config.ray_address,
        config.fallback_embedded,
        config.tasks_per_actor,
        config.ready_timeout_s,
        config.node_poll_s,
        config.on_no_actors,
        config.actor_wait_s,
    ) == (None, False, 2, None, None, "raise", 120.0)
    with pytest.raises(AttributeError):
        config.tasks_per_actor = 4


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(tasks_per_actor=0), r"tasks_per_actor must be a whole number >= 1 \(2: one call running, one queued\)"),
        (dict(tasks_per_actor=1.5), r"tasks_per_actor must be a whole number >= 1 .*got 1.5"),
        (dict(ready_timeout_s=0), r"ready_timeout_s must be a number of seconds > 0, or None for .*; got 0"),
        (dict(ready_timeout_s=math.nan), r"ready_timeout_s must be a number of seconds > 0, or None .*; got nan"),
        (dict(node_poll_s=-1), r"node_poll_s must be a number of seconds > 0, or None for HYBRIDLOAD_NODE_POLL_S"),
        (dict(on_no_actors="fallback"), r"on_no_actors must be one of 'local', 'wait', 'raise'; got 'fallback'"),
        (dict(actor_wait_s=-5), r"actor_wait_s must be a number of seconds >= 0; got -5"),
    ],
)
def test_a_pool_config_refuses_a_bad_value_naming_the_field_and_what_to_write(kw, words):
    with pytest.raises(ValueError, match=words):
        PoolConfig(**{"rules": RULES, "on_no_actors": "raise", **kw})


def test_a_pool_config_takes_its_placement_as_placement_rules_not_a_dict():
    with pytest.raises(TypeError, match=r"rules must be a PlacementRules\(placement=\.\.\..*got dict"):
        PoolConfig(rules=dict(placement="any"), on_no_actors="raise")
    with pytest.raises(TypeError, match=r"ray_address must be None, 'auto', 'embedded' or 'host:port'; got 6379"):
        PoolConfig(rules=RULES, ray_address=6379, on_no_actors="raise")


def test_a_pool_given_anything_but_a_pool_config_says_what_to_give_before_connecting():
    with pytest.raises(TypeError, match=r"ActorPool: config must be a PoolConfig\(rules=PlacementRules"):
        ActorPool(object, (), dict(placement="any"))


def test_what_a_pool_is_stays_with_its_class():
    assert (ActorPool.pass_worker_index, ActorPool.fit_request) == (False, False)
    assert (RayLane.pass_worker_index, RayLane.fit_request) == (False, False)
    for drop_in in (DatasetLane, IterableDatasetActors):  # torch's workers: each knows its id; more than cores runs
        assert (drop_in.pass_worker_index, drop_in.fit_request) == (True, True)


def test_an_actor_s_start_timeout_comes_from_the_config_else_the_environment_else_120_s():
    assert start_timeout_seconds(None, env={}) == 120.0
    assert start_timeout_seconds(None, env={"HYBRIDLOAD_ACTOR_START_TIMEOUT_S": "300"}) == 300.0
    assert start_timeout_seconds(30, env={"HYBRIDLOAD_ACTOR_START_TIMEOUT_S": "300"}) == 30.0  # the argument wins
    for bad in ("0", "-2", "soon", "inf"):
        with pytest.raises(
            ValueError, match=r"HYBRIDLOAD_ACTOR_START_TIMEOUT_S='.*': write a positive number of seconds"
        ):
            start_timeout_seconds(None, env={"HYBRIDLOAD_ACTOR_START_TIMEOUT_S": bad})
