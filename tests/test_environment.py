"""Every environment variable hybridload reads is read in `hybridload._environment`: a bad value is
a ValueError naming the variable and what to write. One reading of a number of seconds (argument,
else environment variable, else default) for the pool's start timeout, its keeper's poll and a
join's wait for the GCS: the same rules and the same error."""

import ast
from pathlib import Path

import pytest

from hybridload import _environment as environment
from hybridload.planner._nvml import visible_device_entry
from hybridload.raycluster._node_cluster import job_key
from hybridload.sampling.sharding import resolve_rank

from hybridload.lanes._ray.elastic import poll_seconds
from hybridload.lanes._ray.pool_config import start_timeout_seconds
from hybridload._environment import seconds_setting
from hybridload.raycluster._gcs_probe import join_timeout_s

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


JOB = {"MASTER_ADDR": "h", "MASTER_PORT": "1"}


@pytest.mark.parametrize(
    "read, env, words",
    [
        (
            lambda env: resolve_rank(),
            {"RANK": "x", "WORLD_SIZE": "2"},
            "RANK='x': write a whole number >= 0, such as RANK=0",
        ),
        (lambda env: resolve_rank(), {"RANK": "1", "WORLD_SIZE": "0"}, "WORLD_SIZE='0': write a whole number >= 1"),
        (lambda env: resolve_rank(), {"RANK": "-1", "WORLD_SIZE": "2"}, "RANK='-1': write a whole number >= 0"),
        (visible_device_entry, {"LOCAL_RANK": "gpu0", "CUDA_VISIBLE_DEVICES": "0,1"}, "LOCAL_RANK='gpu0': write"),
        (job_key, {"WORLD_SIZE": "two", **JOB}, "WORLD_SIZE='two': write a whole number >= 1, such as WORLD_SIZE=2"),
        (job_key, {"LOCAL_WORLD_SIZE": "1.5", **JOB}, "LOCAL_WORLD_SIZE='1.5': write a whole number >= 1"),
        (
            environment.object_store_bytes,
            {"HYBRIDLOAD_OBJECT_STORE_BYTES": "1GB"},
            "HYBRIDLOAD_OBJECT_STORE_BYTES='1GB': write a whole number >= 78643200, such as "
            "HYBRIDLOAD_OBJECT_STORE_BYTES=1073741824",
        ),
    ],
)
def test_a_bad_variable_is_refused_naming_it_and_what_to_write(monkeypatch, read, env, words):
    """``RANK=x`` gave "invalid literal for int() with base 10: 'x'", naming neither RANK nor what to write."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as info:
        read(env)
    assert str(info.value).startswith(words), str(info.value)
    assert "as torchrun sets it" in str(info.value) or "object store" in str(info.value)


def test_set_but_empty_reads_as_unset_and_good_values_read_as_numbers():
    assert environment.whole_number("N", 3, env={"N": ""}) == 3
    assert environment.whole_number("N", 3, env={"N": " 7 "}) == 7
    assert environment.rank_and_world_size({"RANK": "", "WORLD_SIZE": "2"}) is None
    assert environment.rank_and_world_size({"RANK": "1", "WORLD_SIZE": "2"}) == (1, 2)
    assert environment.object_store_bytes({}) == 1 << 30
    assert environment.visible_devices({"CUDA_VISIBLE_DEVICES": ""}) == ""  # no GPU, unlike unset


def _environment_reads(tree: ast.AST) -> list[int]:
    """Lines reading ``os.environ`` (``.get``, ``[...]``, ``in``, ``.copy``...) or calling ``os.getenv``;
    writing a variable and passing ``os.environ`` on as a mapping are not reads."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not isinstance(node.value, ast.Name) or node.value.id != "os":
            continue
        up = parents.get(node)
        if node.attr == "getenv":
            lines.append(node.lineno)
        elif node.attr == "environ":
            if isinstance(up, ast.Subscript) and isinstance(up.ctx, ast.Load):
                lines.append(node.lineno)
            elif isinstance(up, ast.Attribute) and up.attr not in ("setdefault", "update", "pop"):
                lines.append(node.lineno)
            elif isinstance(up, ast.Compare) and node is not up.left:
                lines.append(node.lineno)
    return sorted(lines)


def test_every_environment_variable_is_read_in_one_module():
    package = Path(environment.__file__).parent
    offenders = [
        f"{path.relative_to(package.parent)}:{line}"
        for path in sorted(package.rglob("*.py"))
        if path != Path(environment.__file__)
        for line in _environment_reads(ast.parse(path.read_text()))
    ]
    assert not offenders, f"read these through hybridload._environment (it names a bad value): {offenders}"
    assert _environment_reads(ast.parse("import os\nos.environ.get('A')\nos.getenv('B')\n'C' in os.environ")) == [
        2,
        3,
        4,
    ]
