"""Which lanes a loader runs and everything they need, as data: a pure function of the policy and the plan.

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
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import threading
from dataclasses import dataclass

from hybridload.lanes.base import LaneKind
from hybridload.extras import install_hint


#: "auto" picks worker processes for the local lane from this many usable CPUs up where they
#: start by fork (no main-script import, nothing pickled: as torch's DataLoader on Linux).
#: Measured on the 2-core machine, quiet (benchmarks/bench_local_lanes.py, RESULTS.md):
#: processes 1.12-1.23x threads at 1 and 2 workers, in every run of two sessions (the GIL-held
#: Python per sample is shared by every thread); with one CPU there is nothing to gain.
PROCESSES_FROM_CPUS_FORK = 2
#: ... and from this many where they start by forkserver or spawn: those import the main
#: script, which fails for a script without an ``if __name__ == "__main__":`` guard (most quick
#: scripts), so they are the default only where threads clearly stop scaling (a guess until the
#: 16-core sweep in benchmarks/gpu_check.py runs).
PROCESSES_FROM_CPUS = 8


#: mode "auto" starts the GPU lane at this share when neither the policy nor a plan gives one.
START_SHARE = 0.5


@dataclass(frozen=True, kw_only=True)
class LaneSpec:
    """Everything the lanes of a loader need, decoded once from a LoaderPolicy (and a plan)
    by `plan_lanes`; lane builders, the rate probe, the bench and the profiler read it.

    Attributes:
        gpu: build a GPU lane.
        gpu_cap: the GPU lane's share cap (0..1); None: uncapped.
        auto: re-plan the cap online from live lane rates.
        gpu_engines: the GPU engines to try, in order ("dali", "torch"): the first that builds
            runs the GPU lane.
        gpu_engines_note: why "auto" leaves an engine out on this device ("" when it does not).
        gpu_threads: CPU threads of the GPU lane (DALI's; the torch engine's host preparation).
        gpu_memory_budget_mb: upper bound on the GPU lane's output buffers in flight; None: none.
        cpu: the kind of the CPU lane.
        cpu_standby: with a working GPU lane, the CPU lane is a local stand-by for failures only.
        local_workers: threads (or worker processes) of a CPU_LOCAL lane.
        local_processes: a CPU_LOCAL primary lane runs worker processes (else threads).
        start_method: how those processes start ("fork", "forkserver" or "spawn").
        cpu_actors: Ray CPU actors of a CPU_ACTORS lane; None: as many as the cluster's CPUs allow.
        ray_address, placement, reserve_local_cpus, ship_bytes, on_no_actors, actor_wait_s: as
            ``LoaderPolicy``, for the CPU_ACTORS lane.
        on_error: "raise" or "skip": what every lane does with a bad sample.
        notes: things the user should hear (logged as warnings when the lanes are built).
    """

    gpu: bool
    gpu_cap: float | None
    auto: bool
    gpu_engines: tuple[str, ...]
    gpu_engines_note: str = ""
    gpu_threads: int
    gpu_memory_budget_mb: float | None
    cpu: LaneKind
    cpu_standby: bool = False
    local_workers: int
    local_processes: bool = False
    start_method: str = "fork"
    cpu_actors: int | None
    ray_address: str | None
    placement: str
    reserve_local_cpus: int
    on_no_actors: str = "local"
    actor_wait_s: float = 120.0
    ship_bytes: bool
    on_error: str
    notes: tuple[str, ...] = ()

    @property
    def ships_recipe(self) -> tuple[str, str] | None:
        """How the recipe travels to the primary CPU lane's workers: (serializer, where) —
        ("pickle", "worker processes") or ("cloudpickle", "Ray actors") — or None when the
        work runs in this process."""
        if self.gpu and self.cpu_standby:
            return None  # the stand-by lane: threads in this process
        if self.cpu is LaneKind.CPU_ACTORS:
            return ("cloudpickle", "Ray actors")
        if not self.local_processes or self.start_method == "fork":
            return None  # threads, or processes forked from this one: nothing is pickled
        return ("pickle", "worker processes")

    @property
    def actor_fallback(self) -> bool:
        """The Ray lane runs beside a local stand-in (threads in this process) that takes the
        batches while the cluster gives this rank no actor (``on_no_actors="local"``)."""
        return self.cpu is LaneKind.CPU_ACTORS and self.on_no_actors == "local" and not (self.gpu and self.cpu_standby)

    @property
    def start_share(self) -> float:
        """The GPU share the loader starts with (for reporting)."""
        if not self.gpu:
            return 0.0
        return 1.0 if self.gpu_cap is None else self.gpu_cap

    @property
    def gpu_memory_budget_bytes(self) -> int | None:
        """``gpu_memory_budget_mb`` in bytes (what the dispatcher holds device batches to)."""
        return None if self.gpu_memory_budget_mb is None else int(self.gpu_memory_budget_mb * 2**20)


def plan_lanes(policy, plan=None, *, ray_installed: bool = True, ray_address_env: str | None = None,
               cpus: int = 1, device="cpu", recipe=None) -> LaneSpec:
    """The lanes for ``policy`` (a LoaderPolicy) and an optional ``plan`` (a Plan): the one
    place a policy is decoded (``LoaderPolicy.lane_spec`` calls it with this process's facts).

    ``ray_address_env``: the RAY_ADDRESS environment variable; ``cpus``: the CPUs this
    process may use; ``device``: where batches land (a torch.device or its name: the GPU
    engines to try depend on its type); all passed in, so this stays pure. ``recipe``: a
    recipe that is not ``gpu_capable`` turns the GPU lane off.
    """
    cpu, notes = _cpu_kind(policy, ray_installed=ray_installed, ray_address_env=ray_address_env)
    start = resolve_start_method(policy.start_method, available=tuple(mp.get_all_start_methods()),
                                 platform=sys.platform)
    workers = policy.local_workers
    if workers == "auto" and policy.cpu_actors == 0:
        workers = "threads"  # cpu_actors=0 asks for the in-process lane (the policy's documented meaning)
    engines, engines_note = gpu_engines(policy.gpu_engine, str(device))
    kw = dict(cpu=cpu, notes=tuple(notes), start_method=start, local_processes=local_processes(workers, cpus, start),
              gpu_engines=engines, gpu_engines_note=engines_note, gpu_threads=policy.gpu_threads,
              gpu_memory_budget_mb=policy.gpu_memory_budget_mb,
              local_workers=policy.threads if policy.threads is not None else cpus, cpu_actors=policy.cpu_actors,
              ray_address=policy.ray_address, placement=policy.placement,
              reserve_local_cpus=policy.reserve_local_cpus, on_no_actors=policy.on_no_actors,
              actor_wait_s=policy.actor_wait_s, ship_bytes=policy.ship_bytes, on_error=policy.on_error)
    if recipe is not None and not recipe.gpu_capable and policy.mode != "cpu":
        cpu_only = ", ".join(repr(s) for s in recipe.stages if not getattr(s, "gpu_capable", True))
        kw["notes"] += (f"mode={policy.mode!r}: the GPU lane is disabled because the recipe holds {cpu_only}, which "
                        "only the CPU kernels run; every batch goes to the CPU lane (set LoaderPolicy(mode='cpu') to "
                        "silence this)",)
        return LaneSpec(gpu=False, gpu_cap=None, auto=False, **kw)
    if policy.mode == "gpu":
        return LaneSpec(gpu=True, gpu_cap=None, auto=False, cpu_standby=True, **kw)
    if policy.mode == "split":
        share = policy.gpu_share if policy.gpu_share is not None else plan.gpu_share
        return LaneSpec(gpu=share > 0, gpu_cap=share, auto=False, **kw)
    if policy.mode == "auto" and policy.gpu_engine == "auto" and engines_note:
        # auto builds a GPU lane only on a GPU; DALI's CPU-only stand-in is for an explicit "gpu"/"split"
        kw["notes"] += (f"mode='auto': no GPU lane, {engines_note}; every batch goes to the CPU lane (mode='gpu' or "
                        "'split' runs DALI's CPU-only stand-in; mode='cpu' silences this)",)
        return LaneSpec(gpu=False, gpu_cap=None, auto=False, **kw)
    if policy.mode == "auto":
        share = policy.gpu_share if policy.gpu_share is not None else (
            plan.gpu_share if plan is not None else START_SHARE)
        return LaneSpec(gpu=True, gpu_cap=share, auto=True, **kw)
    return LaneSpec(gpu=False, gpu_cap=None, auto=False, **kw)


def gpu_engines(asked: str, device: str) -> tuple[tuple[str, ...], str]:
    """The GPU engines to try for ``LoaderPolicy.gpu_engine`` ``asked`` on ``device`` (a device
    name such as "cuda:0" or "cpu"), and why "auto" leaves one out ("" when it does not):
    a named engine alone; "auto" DALI then the torch engine on a CUDA device, else DALI alone
    (its CPU-only stand-in: never the torch engine on CPU tensors)."""
    if asked != "auto":
        return (asked,), ""
    if device.partition(":")[0] == "cuda":
        return ("dali", "torch"), ""
    return ("dali",), f"the loader's device is {device}, not a CUDA device"


def local_processes(local_workers: str, cpus: int, start_method: str = "fork") -> bool:
    """Whether the local lane runs worker processes: "processes", or "auto" with at least
    `PROCESSES_FROM_CPUS_FORK` usable CPUs when they fork, else
    `PROCESSES_FROM_CPUS`."""
    if local_workers != "auto":
        return local_workers == "processes"
    return cpus >= (PROCESSES_FROM_CPUS_FORK if start_method == "fork" else PROCESSES_FROM_CPUS)


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
            "machine, ray_address='auto' or RAY_ADDRESS for a running one, or cpu_actors=None to silence this"]
    if policy.cpu_actors is None and not ray_installed:
        return LaneKind.CPU_LOCAL, [
            f"Ray is not installed: running the CPU work on this machine ({install_hint('ray')} for Ray "
            "CPU actors; set cpu_actors=0 to silence this)"]
    return LaneKind.CPU_ACTORS, []


class LaneCaps:
    """The share cap of each lane kind (0..1; absent: uncapped), with its own lock: the
    pass's dispatcher reads it and is its only writer (through its caps hook); others read
    a ``snapshot()``."""

    def __init__(self, caps: dict[LaneKind, float] | None = None):
        self._lock = threading.Lock()
        self._caps = dict(caps or {})

    def get(self, kind: LaneKind) -> float | None:
        with self._lock:
            return self._caps.get(kind)

    def set(self, kind: LaneKind, share: float) -> None:
        with self._lock:
            self._caps[kind] = float(share)

    def snapshot(self) -> dict[LaneKind, float]:
        with self._lock:
            return dict(self._caps)
