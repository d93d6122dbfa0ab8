"""The one decoding of a policy (hybridload._policy.decode) is a pure function of (policy, plan, facts):
checked directly, mode by mode; the loader, the bench, the rate probe and the profiler all run the LaneSpec
it decodes, and each knob keeps the policy's name on the way."""

import pytest

from hybridload import LoaderPolicy
from hybridload.lanes._base import LaneKind
from hybridload._policy.decode import decode_lanes
from hybridload.planner._plan import Plan

#: policies, specs and fakes only: the Ray and process words here start nothing (conftest.tiers_of)
pytestmark = pytest.mark.starts_nothing


def a_plan(share):
    return Plan(gpu_share=share, local_threads=2, window=4)


@pytest.mark.parametrize(
    "policy,plan,expected",
    [
        (LoaderPolicy(mode="cpu", cpu_actors=0), None, (False, None, False, LaneKind.CPU_LOCAL, False)),
        (LoaderPolicy(mode="cpu"), None, (False, None, False, LaneKind.CPU_LOCAL, False)),
        (LoaderPolicy(mode="cpu", ray_address="embedded"), None, (False, None, False, LaneKind.CPU_ACTORS, False)),
        (LoaderPolicy(mode="gpu", cpu_actors=0), None, (True, None, False, LaneKind.CPU_LOCAL, True)),
        (LoaderPolicy(mode="split", gpu_share=0.3, cpu_actors=0), None, (True, 0.3, False, LaneKind.CPU_LOCAL, False)),
        (LoaderPolicy(mode="split", gpu_share=0.0, cpu_actors=0), None, (False, 0.0, False, LaneKind.CPU_LOCAL, False)),
        (
            LoaderPolicy(mode="split", plan=a_plan(0.7), cpu_actors=0),
            a_plan(0.7),
            (True, 0.7, False, LaneKind.CPU_LOCAL, False),
        ),
        (
            LoaderPolicy(mode="auto", gpu_engine="dali", cpu_actors=0),
            None,
            (True, 0.5, True, LaneKind.CPU_LOCAL, False),
        ),
        (
            LoaderPolicy(mode="auto", gpu_engine="dali", cpu_actors=0),
            a_plan(0.2),
            (True, 0.2, True, LaneKind.CPU_LOCAL, False),
        ),
        (
            LoaderPolicy(mode="auto", gpu_engine="dali", gpu_share=0.9, cpu_actors=0),
            a_plan(0.2),
            (True, 0.9, True, LaneKind.CPU_LOCAL, False),
        ),
    ],
    ids=[
        "cpu-local",
        "cpu-default-local",
        "cpu-actors-embedded",
        "gpu",
        "split",
        "split-zero",
        "split-from-plan",
        "auto",
        "auto-plan",
        "auto-policy-wins",
    ],
)
def test_the_decoding_follows_the_mode_table(policy, plan, expected):
    spec = decode_lanes(policy, plan)
    assert (spec.gpu, spec.gpu_share, spec.auto, spec.cpu, spec.cpu_standby) == expected
    assert not spec.notes


@pytest.mark.parametrize(
    "policy,env,kind",
    [
        (LoaderPolicy(), None, LaneKind.CPU_LOCAL),
        (LoaderPolicy(), "10.0.0.1:6379", LaneKind.CPU_ACTORS),
        (LoaderPolicy(cpu_actors=0), "10.0.0.1:6379", LaneKind.CPU_LOCAL),
        (LoaderPolicy(ray_address="auto"), None, LaneKind.CPU_ACTORS),
        (LoaderPolicy(ray_address="10.0.0.1:6379"), None, LaneKind.CPU_ACTORS),
        (LoaderPolicy(ray_address="embedded", cpu_actors=2), None, LaneKind.CPU_ACTORS),
    ],
    ids=["default-no-ray", "ray-address-env", "cpu-actors-0-wins", "auto", "host-port", "embedded"],
)
def test_ray_is_used_only_when_a_cluster_is_configured_or_asked_for(policy, env, kind):
    spec = decode_lanes(policy, None, ray_address_env=env)
    assert spec.cpu is kind and not spec.notes


def test_actors_asked_without_a_cluster_run_locally_and_say_how_to_get_ray():
    spec = decode_lanes(LoaderPolicy(cpu_actors=3), None, ray_address_env=None)
    assert spec.cpu is LaneKind.CPU_LOCAL and "ray_address='embedded'" in spec.notes[0]


@pytest.mark.parametrize("value", ["", "localhost", "host:port", ":6379", "host:0", "host:70000", 6379, "a b:1"])
def test_a_bad_ray_address_is_refused_naming_what_to_write(value):
    with pytest.raises(ValueError, match="'embedded'.*'auto'.*'host:port'"):
        LoaderPolicy(ray_address=value)


@pytest.mark.parametrize("value", ["embedded", "auto", "127.0.0.1:6379", "ray://head:10001", "[::1]:6379"])
def test_good_ray_addresses_are_accepted(value):
    assert LoaderPolicy(ray_address=value).ray_address == value


def test_without_ray_the_cpu_lane_is_local_and_the_user_is_told():
    spec = decode_lanes(LoaderPolicy(mode="cpu", ray_address="auto"), None, ray_installed=False)
    assert spec.cpu is LaneKind.CPU_LOCAL and "Ray is not installed" in spec.notes[0]
    assert not decode_lanes(LoaderPolicy(mode="cpu", cpu_actors=0), None, ray_installed=False).notes


@pytest.mark.parametrize(
    "asked,available,platform,expected",
    [
        ("auto", ("fork", "spawn", "forkserver"), "linux", "fork"),
        ("auto", ("spawn", "fork", "forkserver"), "darwin", "forkserver"),
        ("auto", ("spawn",), "win32", "spawn"),
        ("forkserver", ("fork", "spawn", "forkserver"), "linux", "forkserver"),
        ("spawn", ("fork", "spawn", "forkserver"), "linux", "spawn"),
    ],
    ids=["linux", "macos", "windows", "asked-forkserver", "asked-spawn"],
)
def test_worker_processes_fork_on_linux_as_torch_dataloader_and_what_is_asked_wins(
    asked, available, platform, expected
):
    from hybridload._policy.decode import resolve_start_method

    assert resolve_start_method(asked, available=available, platform=platform) == expected


@pytest.mark.parametrize(
    "policy,cpus,processes",
    [
        (LoaderPolicy(), 1, False),  # one CPU: nothing to gain
        (LoaderPolicy(), 2, True),  # forked processes from 2 CPUs
        (LoaderPolicy(start_method="forkserver"), 2, False),  # main-script import: only where threads stop
        (LoaderPolicy(start_method="forkserver"), 8, True),
        (LoaderPolicy(cpu_actors=0), 16, False),  # cpu_actors=0: the in-process lane
        (LoaderPolicy(cpu_actors=0, local_workers="processes"), 2, True),
        (LoaderPolicy(local_workers="threads"), 16, False),
    ],
    ids=[
        "1cpu",
        "2cpus-fork",
        "2cpus-forkserver",
        "8cpus-forkserver",
        "cpu-actors-0",
        "asked-processes",
        "asked-threads",
    ],
)
def test_the_default_local_lane_runs_processes_where_they_fork(policy, cpus, processes):
    import sys

    if sys.platform != "linux" and policy.start_method == "auto":
        pytest.skip("auto forks on Linux only")
    spec = decode_lanes(policy, cpus=cpus, ray_address_env=None)
    assert spec.cpu is LaneKind.CPU_LOCAL and spec.local_workers == ("processes" if processes else "threads")


def test_a_start_method_the_platform_lacks_is_refused_naming_the_argument():
    with pytest.raises(ValueError, match="start_method must be one of auto, fork, forkserver, spawn; got 'thread'"):
        LoaderPolicy(start_method="thread")


# ------------------------------------------------------------------ everything a lane needs, decoded once
@pytest.mark.parametrize(
    "asked,device,engines,noted",
    [
        ("auto", "cuda:0", ("dali", "torch"), False),
        ("auto", "cpu", ("dali",), True),  # never the torch engine on CPU tensors; said why
        ("dali", "cuda:1", ("dali",), False),
        ("dali", "cpu", ("dali",), False),  # DALI's CPU-only stand-in, as asked
        ("torch", "cuda:0", ("torch",), False),
        ("torch", "cpu", ("torch",), False),
    ],
    ids=["auto-cuda", "auto-cpu", "dali-cuda", "dali-cpu", "torch-cuda", "torch-cpu"],
)
def test_the_gpu_engines_to_try_follow_the_policy_and_the_device(asked, device, engines, noted):
    import torch

    spec = decode_lanes(LoaderPolicy(mode="gpu", gpu_engine=asked), device=device)
    assert spec.gpu_engines == engines and ("not a CUDA device" in spec.gpu_engines_note) is noted
    assert decode_lanes(LoaderPolicy(mode="gpu", gpu_engine=asked), device=torch.device(device)) == spec


@pytest.mark.parametrize("budget,expected", [(None, None), (64, 64 * 2**20), (0.5, 2**19)])
def test_the_gpu_memory_budget_is_carried_and_converted_in_one_place(budget, expected):
    spec = decode_lanes(LoaderPolicy(mode="split", gpu_share=0.5, gpu_memory_budget_mb=budget, gpu_threads=3))
    from hybridload.lanes._spec import budget_bytes
    from hybridload._policy.decode import knobs

    assert spec.options.gpu.gpu_memory_budget_mb == budget and budget_bytes(budget) == expected
    assert knobs(LoaderPolicy(gpu_memory_budget_mb=budget)).passes.gpu_memory_budget_mb == budget
    assert spec.options.gpu.gpu_threads == 3


@pytest.mark.parametrize(
    "policy,cpus,local,actors",
    [
        (LoaderPolicy(cpu_actors=0), 6, 6, 0),  # the in-process lane on every usable CPU
        (LoaderPolicy(cpu_actors=0, threads=3), 6, 3, 0),  # threads asked: as asked
        (LoaderPolicy(ray_address="embedded"), 4, 4, None),  # None: as many as the cluster allows
        (LoaderPolicy(ray_address="embedded", cpu_actors=5), 4, 4, 5),
    ],
    ids=["local-default", "local-asked", "actors-default", "actors-asked"],
)
def test_actor_counts_and_local_threads_are_in_the_spec(policy, cpus, local, actors):
    spec = decode_lanes(policy, cpus=cpus, ray_address_env=None)
    assert (spec.threads, spec.options.pool.rules.cpu_actors) == (local, actors)


def test_the_spec_carries_every_knob_the_cpu_lanes_take():
    policy = LoaderPolicy(
        ray_address="10.0.0.1:6379", placement="any", reserve_local_cpus=2, ship_bytes=True, on_error="skip"
    )
    spec = decode_lanes(policy)
    pool, o = spec.options.pool, spec.options
    assert (pool.ray_address, pool.rules.placement, pool.rules.reserve_local_cpus, o.ship_bytes, o.on_error) == (
        "10.0.0.1:6379",
        "any",
        2,
        True,
        "skip",
    )


def test_a_spec_is_frozen():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        decode_lanes(LoaderPolicy()).threads = 4


def test_policy_lane_spec_is_the_decoding_with_this_process_facts(monkeypatch, tmp_path):
    import importlib.util

    from hybridload._policy import usable_cpus

    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    path = tmp_path / "plan.json"
    a_plan(0.3).save(path)
    policy = LoaderPolicy(mode="auto", plan=str(path))
    assert policy.lane_spec(device="cuda:0") == decode_lanes(
        policy,
        a_plan(0.3),
        ray_installed=importlib.util.find_spec("ray") is not None,
        ray_address_env="10.0.0.1:6379",
        cpus=usable_cpus(),
        device="cuda:0",
    )
    assert policy.lane_spec(device="cuda:0").gpu_share == 0.3  # the policy's plan file, read
    assert policy.lane_spec(a_plan(0.6), device="cuda:0").gpu_share == 0.6  # a plan passed in wins


# ------------------------------------------------------------------ the loader, bench, rates and profiler agree
def _loader_spec(photo_root, policy, rec, device="cpu"):
    from hybridload import HybridLoader, sources

    with HybridLoader(sources.ImageFolder(photo_root), rec, 4, policy=policy, device=device) as ld:
        return ld.lane_spec  # decoded at construction: no lane is started


@pytest.mark.parametrize("mode", ["single-gpu", "multi-node", "cpu", "gpu", "split", "auto"])
@pytest.mark.parametrize("share", [None, 0.3], ids=["no-plan", "plan"])
def test_the_bench_runs_the_spec_the_loader_decodes_and_re_derives_no_share(photo_root, mode, share, monkeypatch):
    from hybridload import recipe
    from hybridload.cli._bench import policy_for
    from hybridload._policy.decode import START_SHARE

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    rec = recipe.imagenet_train(32)
    plan = None if share is None else a_plan(share)
    policy = policy_for(mode, plan, ray_address=None, threads=1)
    spec = _loader_spec(photo_root, policy, rec)
    assert spec == policy.lane_spec(plan, device="cpu", recipe=rec)
    on_gpu = policy.lane_spec(plan, device="cuda:0", recipe=rec)  # what the same policy decodes on a GPU
    if mode in ("single-gpu", "multi-node", "auto", "split"):  # the plan's share, else the in-line start
        assert on_gpu.gpu_share == (START_SHARE if share is None else share)
        assert on_gpu.auto is (mode != "split")


def test_the_rate_probe_tries_the_loaders_engines_with_the_loaders_spec(photo_root, monkeypatch):
    import torch

    import hybridload.lanes._gpu as gpu
    from hybridload import recipe
    from hybridload.errors import LaneUnavailableError
    from hybridload.planner._rates import gpu_lane_rate

    rec = recipe.imagenet_train(32)
    spec = _loader_spec(photo_root, LoaderPolicy(mode="gpu", gpu_threads=3, gpu_memory_budget_mb=64), rec)
    tried = []

    def unavailable(name, got, *a, **kw):
        tried.append((name, got))
        raise LaneUnavailableError(f"{name} is not here")

    monkeypatch.setattr(gpu, "build_engine", unavailable)
    with pytest.raises(LaneUnavailableError, match="dali: dali is not here"):
        gpu_lane_rate(None, rec, [0, 1], 0.1, batch_size=2, device=torch.device("cpu"), spec=spec)
    assert tried == [(name, spec) for name in spec.gpu_engines]


def test_the_profiler_measures_the_gpu_lane_with_the_spec_its_loader_runs(photo_root, monkeypatch):
    import torch

    from hybridload import recipe, sources
    from hybridload.cli import _profile as profile
    from hybridload.planner._nvml import GpuUnavailable
    from hybridload._policy import usable_cpus

    rec = recipe.imagenet_train(32)
    seen = {}

    def rate(source, recipe_, indices, seconds, *, batch_size, device, spec, seed=0):
        seen["spec"] = spec
        return 100.0, 0.1, "fake GPU lane"

    monkeypatch.setattr(profile, "read_gpu", lambda **kw: GpuUnavailable("no NVML in this test"))
    monkeypatch.setattr(profile, "cpu_rate_per_core", lambda *a, **kw: 50.0)
    monkeypatch.setattr(profile, "measure_loader", lambda *a, **kw: 50.0)
    monkeypatch.setattr(profile, "gpu_lane_rate", rate)
    profile.run_profile(
        sources.ImageFolder(photo_root),
        rec,
        batch_size=4,
        seconds=0.1,
        sample=8,
        gpu_threads=3,
        check_points=False,
        device=torch.device("cpu"),
    )
    cpus = usable_cpus()  # reserve_local_cpus=0
    assert seen["spec"] == _loader_spec(photo_root, profile.profile_policy(1.0, threads=cpus, gpu_threads=3), rec)
    at_half = profile.profile_policy(0.5, threads=cpus, gpu_threads=3).lane_spec(device="cpu", recipe=rec)
    assert (seen["spec"].gpu_engines, seen["spec"].options.gpu) == (
        at_half.gpu_engines,
        at_half.options.gpu,
    )  # what measure_loader runs


@pytest.mark.parametrize(
    "mode,engine,device,gpu",
    [
        ("auto", "auto", "cpu", False),  # auto builds a GPU lane only on a GPU (one note, no stand-in)
        ("auto", "auto", "cuda:0", True),
        ("auto", "dali", "cpu", True),  # a named engine is asked for: DALI's CPU-only stand-in
        ("gpu", "auto", "cpu", True),  # an explicit "gpu" / "split" keeps the stand-in (with its loud warning)
        ("split", "auto", "cpu", True),
    ],
)
def test_auto_mode_builds_no_gpu_lane_without_a_cuda_device(mode, engine, device, gpu):
    policy = LoaderPolicy(mode=mode, gpu_engine=engine, gpu_share=0.5 if mode == "split" else None, cpu_actors=0)
    spec = decode_lanes(policy, device=device)
    assert spec.gpu is gpu
    notes = [n for n in spec.notes if "no GPU lane" in n]
    assert len(notes) == (0 if gpu else 1)
    if notes:
        assert "not a CUDA device" in notes[0] and "mode='cpu'" in notes[0] and not spec.auto


# ------------------------------------------------------------------ one name per knob, one decoding
def _leaves(obj, path=()):
    """(path, value) of every field of an options object, nested options objects walked into."""
    import dataclasses

    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _leaves(value, (*path, f.name))
        else:
            yield (*path, f.name), value


#: a value other than its default for every knob that passes through as written
WRITTEN = dict(
    on_error="skip",
    ship_bytes=True,
    gpu_threads=5,
    gpu_memory_budget_mb=64.0,
    ray_address="10.0.0.1:6379",
    cpu_actors=3,
    placement="any",
    reserve_local_cpus=2,
    on_no_actors="wait",
    actor_wait_s=7.0,
    window=6,
    batch_timeout_s=9.0,
    max_retries=5,
    break_after=3,
    straggler_factor=8.0,
    straggler_min_s=0.5,
    skip_warn_fraction=0.2,
    replan_every=3,
    max_gpu_util=0.5,
)


def test_every_knob_reaches_an_options_object_under_the_policys_name_with_the_value_as_written():
    """Every LoaderPolicy field is either chosen on (`CHOICE`: `decode_lanes`) or a field of the
    same name in an options object `knobs` builds, holding the value as written: a knob renamed
    on its way (``on_no_actors`` -> ``when_empty``) leaves its policy field unmatched here."""
    import dataclasses

    from hybridload._policy.decode import CHOICE, knobs

    policy_fields = {f.name: f.default for f in dataclasses.fields(LoaderPolicy)}
    assert set(WRITTEN) == set(policy_fields) - set(CHOICE)  # a new knob: give it a value here
    assert all(WRITTEN[k] != policy_fields[k] for k in WRITTEN)
    leaves = list(_leaves(knobs(LoaderPolicy(**WRITTEN))))
    named = {path[-1] for path, _ in leaves}
    assert set(policy_fields) - set(CHOICE) <= named  # no knob renamed on its way in
    for path, value in leaves:
        if path[-1] in WRITTEN:
            assert value == WRITTEN[path[-1]], path
    local = decode_lanes(LoaderPolicy(cpu_actors=0, threads=3, local_workers="processes", start_method="spawn"))
    assert (local.threads, local.local_workers, local.start_method) == (3, "processes", "spawn")


def test_every_options_field_named_as_a_knob_has_no_default_or_the_policys():
    """One default per knob: an options object either has none for a knob (the user's field holds
    it) or the policy's own."""
    import dataclasses

    from hybridload._policy.decode import knobs

    policy_defaults = {f.name: f.default for f in dataclasses.fields(LoaderPolicy)}
    built = knobs(LoaderPolicy())
    seen = set()
    stack = [built]
    while stack:
        obj = stack.pop()
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                stack.append(value)
            elif f.name in policy_defaults and f.default is not dataclasses.MISSING:
                seen.add((type(obj).__name__, f.name))
                assert f.default == policy_defaults[f.name], (type(obj).__name__, f.name)
    assert ("PassConfig", "batch_timeout_s") in seen  # the walk reached the options objects' defaults


def _reader_names(reader) -> set[str]:
    """The names a reader takes a knob by: a callable's parameters, or the attributes a module's
    source reads (``.name``)."""
    import inspect
    import re

    if inspect.ismodule(reader):
        return set(re.findall(r"\.([a-z_][a-z0-9_]*)\b", inspect.getsource(reader)))
    return set(inspect.signature(reader).parameters)


def test_every_options_field_is_read_under_its_own_name_by_the_code_that_takes_it():
    """Walks each options object's fields to their readers: each field is a parameter of the
    callable that takes it (the GPU lanes take `GpuOptions` as keywords) or an attribute the
    reading module reads; a field renamed at its reader (``num_threads=spec.gpu_threads``) fails."""
    import dataclasses

    from hybridload.execution import _dispatch as dispatch, _stream as stream, _stragglers as stragglers
    from hybridload.execution import _retry as retry
    from hybridload.execution._pass_config import PassConfig
    from hybridload.execution._stats import LoaderStats
    from hybridload.lanes._gpu.dali import DaliLane
    from hybridload.lanes._gpu.torch_lane import TorchGpuLane
    from hybridload.lanes._local.inprocess import InProcessLane
    from hybridload.lanes._ray import actor_pool, capacity, RayLane
    from hybridload.lanes._ray.pool_config import PoolConfig
    from hybridload.lanes._spec import GpuOptions, LaneOptions
    from hybridload.planner._online import OnlinePlanner
    from hybridload._policy.decode import Knobs
    from hybridload.raycluster import _placement as placement
    from hybridload.raycluster._placement import PlacementRules
    from hybridload.execution._retry import RetryRules, StragglerRule

    readers = {
        GpuOptions: [DaliLane, TorchGpuLane],  # each takes every field
        LaneOptions: [RayLane, InProcessLane],
        PoolConfig: [actor_pool, capacity],
        PlacementRules: [placement, capacity],
        PassConfig: [dispatch, stream],
        RetryRules: [retry],
        StragglerRule: [retry, stragglers],
        Knobs: [LoaderStats, OnlinePlanner.start, OnlinePlanner],
    }
    nested = {"gpu", "pool", "rules", "stragglers", "lanes", "passes"}
    for cls, of in readers.items():
        fields = {f.name for f in dataclasses.fields(cls)} - nested
        if cls is GpuOptions:  # passed whole as keywords: each lane must take each field
            for lane in of:
                assert fields <= _reader_names(lane), (lane, fields - _reader_names(lane))
            continue
        names = set().union(*(_reader_names(r) for r in of))
        assert fields <= names, (cls.__name__, fields - names)


@pytest.mark.parametrize(
    "cpus,start,expected",
    [
        (1, "fork", "threads"),
        (2, "fork", "processes"),
        (7, "spawn", "threads"),
        (8, "forkserver", "processes"),
    ],
)
def test_auto_local_workers_decode_to_the_policys_own_words(cpus, start, expected):
    from hybridload._policy.decode import LOCAL_WORKERS_DECODED, local_workers

    assert local_workers("auto", cpus, start) == expected and expected in LOCAL_WORKERS_DECODED
    assert local_workers("threads", 16) == "threads" and local_workers("processes", 1) == "processes"


@pytest.mark.parametrize(
    "policy,plan,share",
    [
        (LoaderPolicy(mode="split", gpu_share=0.3), a_plan(0.8), 0.3),  # the policy's own share wins
        (LoaderPolicy(mode="split", plan=a_plan(0.8)), a_plan(0.8), 0.8),  # else the plan's
        (LoaderPolicy(mode="auto"), None, 0.5),  # else auto's in-line start
    ],
)
def test_the_start_share_is_read_in_one_place(policy, plan, share):
    from hybridload._policy.decode import start_share

    assert start_share(policy, plan) == share


@pytest.mark.parametrize(
    "share,actors,threads,mode,expected_share",
    [
        (0.0, 0, 4, "cpu", None),
        (1.0, 0, 0, "gpu", None),  # the plan's GPU takes all and there is no CPU lane in the plan
        (1.0, 0, 4, "split", 1.0),
        (0.4, 6, 0, "split", 0.4),
    ],
)
def test_a_fitted_plan_decodes_to_the_policy_settings_that_carry_it_out(share, actors, threads, mode, expected_share):
    from hybridload.planner._fit import Fitted
    from hybridload._policy.decode import plan_settings

    plan = Plan(gpu_share=share, local_threads=threads, cpu_actors={"n": actors} if actors else {}, window=6)
    kw = plan_settings(plan, Fitted(gpu_share=share, cpu_actors=actors, threads=max(1, threads)))
    assert (kw["mode"], kw["gpu_share"], kw["window"], kw["plan"]) == (mode, expected_share, 6, plan)
    assert (kw["cpu_actors"], kw.get("threads"), kw.get("placement")) == (
        (actors, None, "remote-first") if actors else (0, max(1, threads), None)
    )
    LoaderPolicy(**kw)  # a valid policy


def test_each_pass_runs_the_settings_the_policy_decodes_to():
    from hybridload.execution._pass_config import PassConfig
    from hybridload.execution._retry import RetryRules, StragglerRule
    from hybridload._policy.decode import knobs

    policy = LoaderPolicy(
        window=3,
        batch_timeout_s=7.0,
        max_retries=1,
        break_after=4,
        straggler_factor=None,
        straggler_min_s=0.5,
        gpu_memory_budget_mb=2,
    )
    assert knobs(policy).passes == PassConfig(
        window=3,
        batch_timeout_s=7.0,
        rules=RetryRules(1, 4),
        stragglers=StragglerRule(None, 0.5),
        gpu_memory_budget_mb=2,
    )
    assert knobs(LoaderPolicy()).passes == PassConfig()  # the defaults agree


@pytest.mark.parametrize("dali_installed", [True, False])
@pytest.mark.parametrize("mode", ["auto", "split"])
def test_no_gpu_here_offers_dalis_stand_in_only_where_dali_is_installed(mode, dali_installed):
    """On a CPU device: where DALI is installed its CPU-only mode stands in ("split") and the auto note
    says so; where it is not, nothing is tried and every note says DALI is not installed."""
    policy = LoaderPolicy(mode=mode, gpu_share=0.5 if mode == "split" else None, cpu_actors=0)
    spec = decode_lanes(policy, device="cpu", dali_installed=dali_installed)
    assert spec.gpu_engines == (("dali",) if dali_installed else ())
    said = " ".join(spec.notes) + " " + spec.gpu_engines_note
    assert ("would run DALI's CPU-only stand-in" in said) is (dali_installed and mode == "auto"), said
    assert ("not installed" in said) is (not dali_installed), said
    assert decode_lanes(policy, device="cuda:0", dali_installed=dali_installed).gpu_engines == ("dali", "torch")
