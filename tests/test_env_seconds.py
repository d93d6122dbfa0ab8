"""One reading of a number of seconds (argument, else environment variable, else default) for
the pool's start timeout, its keeper's poll and a join's wait for the GCS: the same rules and
the same error, naming where the bad value came from and what to write."""

import pytest

from hybridload.lanes.ray.elastic import poll_seconds
from hybridload.lanes.ray.pool_config import start_timeout_seconds
from hybridload.raycluster.env_seconds import seconds_setting
from hybridload.raycluster.gcs_probe import join_timeout_s

ENV = "HYBRIDLOAD_TEST_S"


def test_the_argument_wins_else_the_variable_else_the_default():
    assert seconds_setting(3, ENV, 5.0, env={ENV: "7"}) == 3.0
    assert seconds_setting(None, ENV, 5.0, env={ENV: "7.5"}) == 7.5
    assert seconds_setting(None, ENV, 5.0, env={}) == 5.0
    assert seconds_setting(None, ENV, 5.0, env={ENV: ""}) == 5.0  # set but empty: as unset


@pytest.mark.parametrize("bad", ["soon", "0", "-1", "inf", "nan"])
def test_a_bad_variable_is_named_with_what_to_write(bad):
    with pytest.raises(ValueError, match=rf"^{ENV}='{bad}': write a positive number of seconds, such as 5 "):
        seconds_setting(None, ENV, 5.0, env={ENV: bad})


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), True, "soon"])
def test_a_bad_argument_is_named_with_what_to_write_whatever_the_environment_says(bad):
    with pytest.raises(ValueError, match=r"^wait_s=.*: write a positive number of seconds, such as 5 "):
        seconds_setting(bad, ENV, 5.0, arg="wait_s", env={ENV: "7"})


@pytest.mark.parametrize(
    "read, variable, default",
    [
        (lambda env: poll_seconds(None, env=env), "HYBRIDLOAD_NODE_POLL_S", 5),
        (lambda env: start_timeout_seconds(None, env=env), "HYBRIDLOAD_ACTOR_START_TIMEOUT_S", 120),
        (lambda env: join_timeout_s(env), "HYBRIDLOAD_RAY_JOIN_TIMEOUT_S", 20),
    ],
)
def test_each_setting_reads_its_variable_the_same_way(read, variable, default):
    assert read({}) == default and read({variable: "2.5"}) == 2.5
    with pytest.raises(ValueError, match=rf"^{variable}='-3': write a positive number of seconds, such as {default} "):
        read({variable: "-3"})


def test_a_bad_argument_names_the_argument_not_the_variable():
    with pytest.raises(ValueError, match=r"^node_poll_s=0: "):
        poll_seconds(0, env={})
    with pytest.raises(ValueError, match=r"^ready_timeout_s=-1: "):
        start_timeout_seconds(-1, env={})
