"""The one decoding of a LoaderPolicy: which lanes run, with what (a `LaneSpec`), and how each
pass runs (a `PassConfig`); pure functions of the policy, a plan and this process's facts.

==========  ===========================  =====================  =====================
mode        GPU lane                     its share cap          CPU lane
==========  ===========================  =====================  =====================
"cpu"       none                         —                      primary
"gpu"       yes                          none (takes all)       CPU_LOCAL stand-by
"split"     when the share > 0           policy, else plan      primary
"auto"      yes                          start: policy, plan,   primary
                                         else 0.5; re-planned
==========  ===========================  =====================  =====================

A stand-by lane takes only what the GPU lane fails or reroutes. When the GPU lane cannot
be built, the CPU lane becomes the primary lane. A recipe that is not ``gpu_capable`` (it
holds a stage only the CPU kernels run, e.g. a ``CustomStage``) gets no GPU lane in any
mode: the CPU lane is the primary lane, and one note says so.

The CPU lane's kind: Ray is the scale-out engine, used only when a cluster is configured
(``ray_address`` "auto" / "host:port", or RAY_ADDRESS in the environment) or asked for
(``ray_address="embedded"``: a loopback cluster started for this process). Otherwise the
CPU work runs on this machine without Ray.

=============  ======================  ===============  ==========================
cpu_actors     ray_address / env       Ray installed    CPU lane
=============  ======================  ===============  ==========================
0              any                     any              CPU_LOCAL
None           None, no RAY_ADDRESS    any              CPU_LOCAL (the default)
N >= 1         None, no RAY_ADDRESS    any              CPU_LOCAL, with a note
None / N       set (or RAY_ADDRESS)    yes              CPU_ACTORS
None           set (or RAY_ADDRESS)    no               CPU_LOCAL, with a note
N >= 1         set (or RAY_ADDRESS)    no               CPU_ACTORS (fails to build,
                                                        naming the install command)
=============  ======================  ===============  ==========================

The knobs that pass through as written go, under the policy's names, into the options object
of the code that reads them, all built by `knobs` (the one function that reads them): a field
of an options object named as a policy field takes that field's value; its check is the
options object's. `decode_lanes` only chooses the lanes and the GPU share (`CHOICE`).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import sys
from typing import Any

from hybridload.execution.pass_config import PassConfig
from hybridload.execution.retry import RetryRules, StragglerRule
from hybridload.extras import install_hint
from hybridload.lanes.base import LaneKind
from hybridload.lanes.ray.pool_config import PoolConfig
from hybridload.lanes.spec import GpuOptions, LaneOptions, LaneSpec
from hybridload.raycluster.placement import PlacementRules
from hybridload.planner.fit import Fitted
from hybridload.planner.plan import Plan

#: "auto" picks worker processes for the local lane from this many usable CPUs up where they
#: start by fork (no main-script import, nothing pickled: as torch's DataLoader on Linux).
#: Measured on the 2-core machine, quiet (benchmarks/bench_local_lanes.py, RESULTS.md):
#: processes 1.12-1.23x threads at 1 and 2 workers, in every run (the GIL-held
#: Python per sample is shared by every thread); with one CPU there is nothing to gain.
PROCESSES_FROM_CPUS_FORK = 2
#: ... and from this many where they start by forkserver or spawn: those import the main
#: script, which fails for a script without an ``if __name__ == "__main__":`` guard (most quick
#: scripts), so they are the default only where threads clearly stop scaling (a guess until the
#: 16-core sweep in tools/gpu_check/gpu_check.py runs).
PROCESSES_FROM_CPUS = 8

#: mode "auto" starts the GPU lane at this share when neither the policy nor a plan gives one.
START_SHARE = 0.5

#: the policy fields only `decode_lanes` reads, to choose the lanes and the GPU share; every other
#: field is a knob `knobs` hands on as written (``cpu_actors`` and ``ray_address`` also choose
#: the CPU lane's kind)
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
    """The lanes for ``policy`` (a LoaderPolicy) and an optional ``plan``, and the GPU share:
    the one place they are chosen (``LoaderPolicy.lane_spec`` calls it with this process's facts).

    ``dali_installed``: whether DALI is (its CPU-only mode stands in for the GPU lane where
    no GPU is); ``ray_address_env``: the RAY_ADDRESS environment variable; ``cpus``: the CPUs this
    process may use; ``device``: where batches land (a torch.device or its name: the GPU
    engines to try depend on its type); all passed in, so this stays pure. ``recipe``: a
    recipe that is not ``gpu_capable`` turns the GPU lane off. ``options``: the knobs the lanes
    take (`knobs`' ``lanes``); default: the policy's, for rank 0 of 1.
    """
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
    """The GPU share a "split" or "auto" policy starts at: its own ``gpu_share``, else the
    plan's, else (auto) `START_SHARE`; the one place a plan's share is read."""
    if policy.gpu_share is not None:
        return policy.gpu_share
    return plan.gpu_share if plan is not None else START_SHARE


def plan_settings(plan: Plan, fit: Fitted) -> dict[str, Any]:
    """The LoaderPolicy fields that carry out ``plan`` as fitted here (``fit``, from
    `hybridload.planner.fit.fit_plan`): the mode, the GPU share, the window, and either Ray
    actors or local threads (``LoaderPolicy.from_plan`` adds the user's overrides)."""
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
    """The options objects built from ``policy``: the one function that reads its knobs. Each
    options field named as a policy field takes that field's value (`named`), so a knob keeps
    its name from the user's field to its reader; ``rank`` and ``world_size`` place the Ray
    lane's actors. A bad value raises the options object's ValueError, naming the field."""
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
    """The GPU engines to try for ``LoaderPolicy.gpu_engine`` ``asked`` on ``device`` (a device
    name such as "cuda:0" or "cpu"), and why "auto" leaves one out ("" when it does not):
    a named engine alone; "auto" DALI then the torch engine on a CUDA device, else DALI alone
    where it is installed (its CPU-only stand-in: never the torch engine on CPU tensors), else none."""
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
    """What the local lane runs on for ``LoaderPolicy.local_workers`` ``asked``: "threads" or
    "processes" as asked; "auto" is processes from `PROCESSES_FROM_CPUS_FORK` usable CPUs
    when they fork, else from `PROCESSES_FROM_CPUS`, and threads below."""
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
    """The CPU lane's kind and the notes for the user (the second table of the module docstring)."""
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
