"""LaneSpec: which lanes a loader runs and everything they need, as data. Decoded once from a
LoaderPolicy (and a plan) by `hybridload.policy.decode`; the lane builders, the rate probe, the
bench and the profiler read it. A knob keeps the policy's name here."""

from __future__ import annotations

from dataclasses import dataclass

from hybridload.lanes.base import LaneKind


@dataclass(frozen=True, kw_only=True)
class LaneSpec:
    """Everything the lanes of a loader need, decoded once from a LoaderPolicy (and a plan)
    by `hybridload.policy.decode.decode_lanes`. A field named as a policy field is that knob.

    Attributes:
        gpu: build a GPU lane.
        gpu_share: the GPU lane's share cap (0..1); None: uncapped.
        auto: re-plan the cap online from live lane rates.
        gpu_engines: the GPU engines to try, in order ("dali", "torch"): the first that builds
            runs the GPU lane.
        gpu_engines_note: why "auto" leaves an engine out on this device ("" when it does not).
        gpu_threads: CPU threads of the GPU lane (DALI's; the torch engine's host preparation).
        gpu_memory_budget_mb: upper bound on the GPU lane's output buffers in flight; None: none.
        cpu: the kind of the CPU lane.
        cpu_standby: with a working GPU lane, the CPU lane is a local stand-by for failures only.
        threads: threads (or worker processes) of a CPU_LOCAL lane.
        local_workers: what a CPU_LOCAL primary lane runs on: "threads" or "processes".
        start_method: how those processes start ("fork", "forkserver" or "spawn").
        cpu_actors: Ray CPU actors of a CPU_ACTORS lane; None: as many as the cluster's CPUs allow.
        ray_address, placement, reserve_local_cpus, ship_bytes, on_no_actors, actor_wait_s: as
            ``LoaderPolicy``, for the CPU_ACTORS lane.
        on_error: "raise" or "skip": what every lane does with a bad sample.
        notes: things the user should hear (logged as warnings when the lanes are built).
    """

    gpu: bool
    gpu_share: float | None
    auto: bool
    gpu_engines: tuple[str, ...]
    gpu_engines_note: str = ""
    gpu_threads: int
    gpu_memory_budget_mb: float | None
    cpu: LaneKind
    cpu_standby: bool = False
    threads: int
    local_workers: str = "threads"
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
        if self.local_workers != "processes" or self.start_method == "fork":
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
        return 1.0 if self.gpu_share is None else self.gpu_share

    @property
    def gpu_memory_budget_bytes(self) -> int | None:
        """``gpu_memory_budget_mb`` in bytes (what the dispatcher holds device batches to)."""
        return budget_bytes(self.gpu_memory_budget_mb)


def budget_bytes(gpu_memory_budget_mb: float | None) -> int | None:
    """A GPU memory budget in MiB as bytes (None: no budget): the one conversion, for the
    dispatcher's device budget and the GPU lane's slots alike."""
    return None if gpu_memory_budget_mb is None else int(gpu_memory_budget_mb * 2**20)
