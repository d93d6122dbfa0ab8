"""plan_lanes is a pure function of (policy, plan): checked directly, mode by mode."""

import pytest

from hybridload import LoaderPolicy
from hybridload.lanes.base import LaneKind
from hybridload.lanes.spec import LaneCaps, plan_lanes
from hybridload.planner.plan import Plan


def a_plan(share):
    return Plan(gpu_share=share, local_threads=2, window=4)


@pytest.mark.parametrize("policy,plan,expected", [
    (LoaderPolicy(mode="cpu", cpu_actors=0), None, (False, None, False, LaneKind.CPU_LOCAL, False)),
    (LoaderPolicy(mode="cpu"), None, (False, None, False, LaneKind.CPU_LOCAL, False)),
    (LoaderPolicy(mode="cpu", ray_address="embedded"), None, (False, None, False, LaneKind.CPU_ACTORS, False)),
    (LoaderPolicy(mode="gpu", cpu_actors=0), None, (True, None, False, LaneKind.CPU_LOCAL, True)),
    (LoaderPolicy(mode="split", gpu_share=0.3, cpu_actors=0), None, (True, 0.3, False, LaneKind.CPU_LOCAL, False)),
    (LoaderPolicy(mode="split", gpu_share=0.0, cpu_actors=0), None, (False, 0.0, False, LaneKind.CPU_LOCAL, False)),
    (LoaderPolicy(mode="split", plan=a_plan(0.7), cpu_actors=0), a_plan(0.7),
     (True, 0.7, False, LaneKind.CPU_LOCAL, False)),
    (LoaderPolicy(mode="auto", cpu_actors=0), None, (True, 0.5, True, LaneKind.CPU_LOCAL, False)),
    (LoaderPolicy(mode="auto", cpu_actors=0), a_plan(0.2), (True, 0.2, True, LaneKind.CPU_LOCAL, False)),
    (LoaderPolicy(mode="auto", gpu_share=0.9, cpu_actors=0), a_plan(0.2), (True, 0.9, True, LaneKind.CPU_LOCAL, False)),
], ids=["cpu-local", "cpu-default-local", "cpu-actors-embedded", "gpu", "split", "split-zero", "split-from-plan", "auto", "auto-plan",
        "auto-policy-wins"])
def test_plan_lanes_follows_the_mode_table(policy, plan, expected):
    spec = plan_lanes(policy, plan)
    assert (spec.gpu, spec.gpu_cap, spec.auto, spec.cpu, spec.cpu_standby) == expected
    assert not spec.notes


@pytest.mark.parametrize("policy,env,kind", [
    (LoaderPolicy(), None, LaneKind.CPU_LOCAL),
    (LoaderPolicy(), "10.0.0.1:6379", LaneKind.CPU_ACTORS),
    (LoaderPolicy(cpu_actors=0), "10.0.0.1:6379", LaneKind.CPU_LOCAL),
    (LoaderPolicy(ray_address="auto"), None, LaneKind.CPU_ACTORS),
    (LoaderPolicy(ray_address="10.0.0.1:6379"), None, LaneKind.CPU_ACTORS),
    (LoaderPolicy(ray_address="embedded", cpu_actors=2), None, LaneKind.CPU_ACTORS),
], ids=["default-no-ray", "ray-address-env", "cpu-actors-0-wins", "auto", "host-port", "embedded"])
def test_ray_is_used_only_when_a_cluster_is_configured_or_asked_for(policy, env, kind):
    spec = plan_lanes(policy, None, ray_address_env=env)
    assert spec.cpu is kind and not spec.notes


def test_actors_asked_without_a_cluster_run_locally_and_say_how_to_get_ray():
    spec = plan_lanes(LoaderPolicy(cpu_actors=3), None, ray_address_env=None)
    assert spec.cpu is LaneKind.CPU_LOCAL and "ray_address='embedded'" in spec.notes[0]


@pytest.mark.parametrize("value", ["", "localhost", "host:port", ":6379", "host:0", "host:70000", 6379, "a b:1"])
def test_a_bad_ray_address_is_refused_naming_what_to_write(value):
    with pytest.raises(ValueError, match="'embedded'.*'auto'.*'host:port'"):
        LoaderPolicy(ray_address=value)


@pytest.mark.parametrize("value", ["embedded", "auto", "127.0.0.1:6379", "ray://head:10001", "[::1]:6379"])
def test_good_ray_addresses_are_accepted(value):
    assert LoaderPolicy(ray_address=value).ray_address == value


def test_without_ray_the_cpu_lane_is_local_and_the_user_is_told():
    spec = plan_lanes(LoaderPolicy(mode="cpu", ray_address="auto"), None, ray_installed=False)
    assert spec.cpu is LaneKind.CPU_LOCAL and "Ray is not installed" in spec.notes[0]
    assert not plan_lanes(LoaderPolicy(mode="cpu", cpu_actors=0), None, ray_installed=False).notes


def test_lane_caps_are_read_and_written_by_kind():
    caps = LaneCaps({LaneKind.GPU: 0.4})
    assert caps.get(LaneKind.GPU) == 0.4 and caps.get(LaneKind.CPU_LOCAL) is None
    caps.set(LaneKind.GPU, 0.6)
    assert caps.snapshot() == {LaneKind.GPU: 0.6}


@pytest.mark.parametrize("asked,available,platform,expected", [
    ("auto", ("fork", "spawn", "forkserver"), "linux", "fork"),
    ("auto", ("spawn", "fork", "forkserver"), "darwin", "forkserver"),
    ("auto", ("spawn",), "win32", "spawn"),
    ("forkserver", ("fork", "spawn", "forkserver"), "linux", "forkserver"),
    ("spawn", ("fork", "spawn", "forkserver"), "linux", "spawn"),
], ids=["linux", "macos", "windows", "asked-forkserver", "asked-spawn"])
def test_worker_processes_fork_on_linux_as_torch_dataloader_and_what_is_asked_wins(asked, available, platform,
                                                                                   expected):
    from hybridload.lanes.spec import resolve_start_method
    assert resolve_start_method(asked, available=available, platform=platform) == expected


@pytest.mark.parametrize("policy,cpus,processes", [
    (LoaderPolicy(), 1, False),                                   # one CPU: nothing to gain
    (LoaderPolicy(), 2, True),                                    # forked processes from 2 CPUs
    (LoaderPolicy(start_method="forkserver"), 2, False),          # main-script import: only where threads stop
    (LoaderPolicy(start_method="forkserver"), 8, True),
    (LoaderPolicy(cpu_actors=0), 16, False),                      # cpu_actors=0: the in-process lane
    (LoaderPolicy(cpu_actors=0, local_workers="processes"), 2, True),
    (LoaderPolicy(local_workers="threads"), 16, False),
], ids=["1cpu", "2cpus-fork", "2cpus-forkserver", "8cpus-forkserver", "cpu-actors-0", "asked-processes",
        "asked-threads"])
def test_the_default_local_lane_runs_processes_where_they_fork(policy, cpus, processes):
    import sys
    if sys.platform != "linux" and policy.start_method == "auto":
        pytest.skip("auto forks on Linux only")
    spec = plan_lanes(policy, cpus=cpus, ray_address_env=None)
    assert spec.cpu is LaneKind.CPU_LOCAL and spec.local_processes is processes


def test_a_start_method_the_platform_lacks_is_refused_naming_the_argument():
    with pytest.raises(ValueError, match="start_method must be one of auto, fork, forkserver, spawn; got 'thread'"):
        LoaderPolicy(start_method="thread")
