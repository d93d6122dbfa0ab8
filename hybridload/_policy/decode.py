"""The one decoding of a LoaderPolicy, pure functions of the policy, a plan and this process's
facts so every reader gets the same lanes: `decode_lanes` chooses the lanes and the GPU share
(the modes and the CPU lane's kind: docs/guide/concepts.md, "Lanes and modes"), `knobs` hands
every other knob on under its own name (docs/decisions/knobs-flat-one-name.md).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import sys
from typing import Any

from hybridload.execution._pass_config import PassConfig
from hybridload.execution._retry import RetryRules, StragglerRule
from hybridload._extras import install_hint
from hybridload.lanes._base import LaneKind
from hybridload.lanes._ray.pool_config import PoolConfig
from hybridload.lanes._spec import GpuOptions, LaneOptions, LaneSpec
from hybridload.raycluster._placement import PlacementRules
from hybridload.planner._fit import Fitted
from hybridload.planner._plan import Plan

#: "auto" picks forked worker processes for the local lane from this many usable CPUs: on 2 cores
#: processes ran 1.12-1.23x threads (benchmarks/bench_local_lanes.py, RESULTS.md).
PROCESSES_FROM_CPUS_FORK = 2
#: ... and from this many under forkserver or spawn, which need the main script's guard (a guess
#: until the 16-core sweep in tools/gpu_check/gpu_check.py runs).
PROCESSES_FROM_CPUS = 8

#: mode "auto" starts the GPU lane at this share when neither the policy nor a plan gives one.
START_SHARE = 0.5

#: the policy fields only `decode_lanes` reads; every other field is a knob `knobs` hands on
CHOICE = ("mode", "gpu_share", "threads", "local_workers", "start_method", "gpu_engine", "plan")
#: what ``LoaderPolicy.local_workers`` decodes to ("auto" resolved)
LOCAL_WORKERS_DECODED = ("threads", "processes")


def decode_lanes(
    policy,
    plan: Plan | None = None,
    *,
    ray_installed: bool = True,
    dali_installed: bool = True,
    ray_address_env: str | None = None,
    cpus: int = 1,
    device: Any = "cpu",
    recipe: Any = None,
    options: LaneOptions | None = None,
) -> LaneSpec:
    """The lanes and the GPU share for ``policy`` and ``plan``, the one place they are chosen;
    the process's facts come in as arguments so this stays pure. ``options``: the lanes' knobs
    (default: the policy's, for rank 0 of 1)."""
    cpu, notes = _cpu_kind(policy, ray_installed=ray_installed, ray_address_env=ray_address_env)
    start = resolve_start_method(
        policy.start_method, available=tuple(mp.get_all_start_methods()), platform=sys.platform
    )
    workers = policy.local_workers
    if workers == "auto" and policy.cpu_actors == 0:
        workers = "threads"  # cpu_actors=0 asks for the in-process lane (the policy's documented meaning)
    engines, engines_note = gpu_engines(policy.gpu_engine, str(device), dali_installed=dali_installed)
    kw: dict[str, Any] = dict(
        mode=policy.mode,
        options=options if options is not None else knobs(policy).lanes,
        cpu=cpu,
        notes=tuple(notes),
        start_method=start,
        local_workers=local_workers(workers, cpus, start),
        gpu_engines=engines,
        gpu_engines_note=engines_note,
        threads=policy.threads if policy.threads is not None else cpus,
    )
    if recipe is not None and not recipe.gpu_capable and policy.mode != "cpu":
        cpu_only = ", ".join(repr(s) for s in recipe.stages if not getattr(s, "gpu_capable", True))
        kw["notes"] += (
            f"mode={policy.mode!r}: the GPU lane is disabled because the recipe holds {cpu_only}, which "
            "only the CPU kernels run; every batch goes to the CPU lane (set LoaderPolicy(mode='cpu') to "
            "silence this)",
        )
        return LaneSpec(gpu=False, gpu_share=None, auto=False, **kw)
    if policy.mode == "gpu":
        return LaneSpec(gpu=True, gpu_share=None, auto=False, cpu_standby=True, **kw)
    if policy.mode == "split":
        share = start_share(policy, plan)
        return LaneSpec(gpu=share > 0, gpu_share=share, auto=False, **kw)
    if policy.mode == "auto" and policy.gpu_engine == "auto" and engines_note:
        # auto builds a GPU lane only on a GPU; DALI's CPU-only stand-in is for an explicit "gpu"/"split"
        stand_in = "; 'gpu' or 'split' would run DALI's CPU-only stand-in" if engines else ""
        kw["notes"] += (
            f"mode='auto': no GPU lane, {engines_note}: CPU lanes only (mode='cpu' silences this{stand_in})",
        )
        return LaneSpec(gpu=False, gpu_share=None, auto=False, **kw)
    if policy.mode == "auto":
        return LaneSpec(gpu=True, gpu_share=start_share(policy, plan), auto=True, **kw)
    return LaneSpec(gpu=False, gpu_share=None, auto=False, **kw)


def start_share(policy, plan: Plan | None) -> float:
    """The GPU share a "split" or "auto" policy starts at (policy, plan, else `START_SHARE`): the one
    place a plan's share is read."""
    if policy.gpu_share is not None:
        return policy.gpu_share
    return plan.gpu_share if plan is not None else START_SHARE


def plan_settings(plan: Plan, fit: Fitted) -> dict[str, Any]:
    """The LoaderPolicy fields that carry out ``plan`` as fitted here (``from_plan`` adds overrides)."""
    if fit.gpu_share <= 0:
        mode = "cpu"
    elif fit.gpu_share >= 1 and plan.total_actors + plan.local_threads == 0:
        mode = "gpu"
    else:
        mode = "split"
    kw: dict[str, Any] = dict(
        mode=mode, gpu_share=fit.gpu_share if mode == "split" else None, window=plan.window, plan=plan
    )
    if fit.cpu_actors:
        kw.update(cpu_actors=fit.cpu_actors, placement="remote-first")
    else:
        kw.update(cpu_actors=0, threads=fit.threads)
    return kw


@dataclasses.dataclass(frozen=True)
class Knobs:
    """Every knob of a policy that passes through as written, in the options object of the
    code that reads it, under the policy's name.

    Attributes:
        lanes: what the lanes take (`build_lanes`, `make_gpu_lane`).
        passes: how each pass runs (`BatchStream`).
        skip_warn_fraction: `LoaderStats`' warning threshold.
        replan_every: the online planner's re-planning interval (batches).
        max_gpu_util: the online planner's GPU utilization ceiling.
    """

    lanes: LaneOptions
    passes: PassConfig
    skip_warn_fraction: float
    replan_every: int
    max_gpu_util: float


def knobs(policy, *, rank: int = 0, world_size: int = 1) -> Knobs:
    """The options objects built from ``policy``, the one reader of its knobs, each field under the
    policy's name (`named`); a bad value raises the options object's ValueError naming it."""
    pool = named(PoolConfig, policy, rules=named(PlacementRules, policy, rank=rank, world_size=world_size))
    passes = named(PassConfig, policy, rules=named(RetryRules, policy), stragglers=named(StragglerRule, policy))
    return named(
        Knobs, policy, lanes=named(LaneOptions, policy, gpu=named(GpuOptions, policy), pool=pool), passes=passes
    )


def named(cls, policy, **given):
    """``cls`` with each of its fields that the policy has set to the policy's value under the
    same name, the rest from ``given`` (or ``cls``'s defaults)."""
    mine = {f.name for f in dataclasses.fields(policy)}
    kw = {f.name: getattr(policy, f.name) for f in dataclasses.fields(cls) if f.name in mine and f.name not in given}
    return cls(**kw, **given)


def gpu_engines(asked: str, device: str, *, dali_installed: bool = True) -> tuple[tuple[str, ...], str]:
    """The GPU engines to try for ``asked`` on ``device``, and why "auto" leaves one out (""):
    "auto" is DALI then torch on CUDA, else DALI's CPU stand-in where installed, else none."""
    if asked != "auto":
        return (asked,), ""
    if device.partition(":")[0] == "cuda":
        return ("dali", "torch"), ""
    if not dali_installed:
        return (
            (),
            f"the loader's device is {device}, not a CUDA device, and DALI (its CPU-only stand-in) is not installed",
        )
    return ("dali",), f"the loader's device is {device}, not a CUDA device"


def local_workers(asked: str, cpus: int, start_method: str = "fork") -> str:
    """What the local lane runs on, "threads" or "processes", with "auto" resolved by the CPU counts above."""
    if asked != "auto":
        return asked
    enough = cpus >= (PROCESSES_FROM_CPUS_FORK if start_method == "fork" else PROCESSES_FROM_CPUS)
    return "processes" if enough else "threads"


def resolve_start_method(asked: str, *, available: tuple[str, ...], platform: str) -> str:
    """The start method for worker processes: ``asked`` unless "auto"; "auto" is fork on Linux
    (torch's DataLoader's default there), else forkserver, else spawn."""
    if asked != "auto":
        return asked
    if platform.startswith("linux") and "fork" in available:
        return "fork"
    return "forkserver" if "forkserver" in available else "spawn"


def _cpu_kind(policy, *, ray_installed: bool, ray_address_env: str | None) -> tuple[LaneKind, list[str]]:
    """The CPU lane's kind and the notes for the user (the table on docs/guide/concepts.md)."""
    if policy.cpu_actors == 0:
        return LaneKind.CPU_LOCAL, []
    if policy.ray_address is None and not ray_address_env:
        if policy.cpu_actors is None:
            return LaneKind.CPU_LOCAL, []
        return LaneKind.CPU_LOCAL, [
            f"cpu_actors={policy.cpu_actors} asks for Ray actors but no Ray cluster is configured: running the CPU "
            "work on this machine without Ray; set LoaderPolicy(ray_address='embedded') for a Ray cluster on this "
            "machine, ray_address='auto' or RAY_ADDRESS for a running one, or cpu_actors=None to silence this"
        ]
    if policy.cpu_actors is None and not ray_installed:
        return LaneKind.CPU_LOCAL, [
            f"Ray is not installed: running the CPU work on this machine ({install_hint('ray')} for Ray "
            "CPU actors; set cpu_actors=0 to silence this)"
        ]
    return LaneKind.CPU_ACTORS, []
