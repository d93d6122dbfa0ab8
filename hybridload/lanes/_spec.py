"""`LaneSpec`, which lanes a loader runs, as data decoded once by `hybridload._policy.decode`, and
`LaneOptions`, the knobs the lanes take under the policy's names
(docs/decisions/knobs-flat-one-name.md)."""

from __future__ import annotations

from dataclasses import dataclass

from hybridload.lanes._base import LaneKind
from hybridload.lanes._ray.pool_config import PoolConfig

#: what a lane does with a bad sample: stop, naming it, or a zero image in its place
ON_ERROR = ("raise", "skip")


@dataclass(frozen=True, kw_only=True)
class GpuOptions:
    """The GPU lane's knobs, under the policy's names, passed to the engine's lane as keywords.

    Attributes:
        gpu_threads: CPU threads of the GPU lane (DALI's; the torch engine's host preparation).
        gpu_memory_budget_mb: upper bound on the GPU lane's output buffers in flight; None: none.
    """

    gpu_threads: int
    gpu_memory_budget_mb: float | None

    def __post_init__(self):  # gpu_memory_budget_mb is checked by the PassConfig built beside it (`knobs`)
        if not _count(self.gpu_threads) or self.gpu_threads == 0:
            raise ValueError(f"gpu_threads must be an int >= 1, got {self.gpu_threads!r}")


@dataclass(frozen=True, kw_only=True)
class LaneOptions:
    """What the lanes take from the policy, under its names, built by
    `hybridload._policy.decode.knobs` alone; no defaults here, so the user's field holds the one
    default.

    Attributes:
        on_error: "raise" or "skip": what every lane does with a bad sample.
        ship_bytes: the Ray lane's driver reads the samples and sends their bytes.
        gpu: the GPU lane's knobs.
        pool: the Ray lane's actor pool.
    """

    on_error: str
    ship_bytes: bool
    gpu: GpuOptions
    pool: PoolConfig

    def __post_init__(self):
        if self.on_error not in ON_ERROR:
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        if not isinstance(self.ship_bytes, bool):
            raise ValueError(f"ship_bytes must be True or False, got {self.ship_bytes!r}")


@dataclass(frozen=True, kw_only=True)
class LaneSpec:
    """Which lanes a loader runs and the GPU share, decoded once by
    `hybridload._policy.decode.decode_lanes`, with the knobs the lanes take (``options``).

    Attributes:
        mode: the policy's mode, as written (for ``stats()``).
        gpu: build a GPU lane.
        gpu_share: the GPU lane's share cap (0..1); None: uncapped.
        auto: re-plan the cap online from live lane rates.
        gpu_engines: the GPU engines to try, in order: the first that builds runs.
        gpu_engines_note: why "auto" leaves an engine out on this device ("" when it does not).
        cpu: the kind of the CPU lane.
        cpu_standby: with a working GPU lane, the CPU lane is a local stand-by for failures only.
        threads: threads (or worker processes) of a CPU_LOCAL lane.
        local_workers: what a CPU_LOCAL primary lane runs on: "threads" or "processes".
        start_method: how those processes start ("fork", "forkserver" or "spawn").
        options: the knobs the lanes take, under the policy's names.
        notes: what the user should hear, logged when the lanes are built.
    """

    mode: str
    gpu: bool
    gpu_share: float | None
    auto: bool
    gpu_engines: tuple[str, ...]
    gpu_engines_note: str = ""
    cpu: LaneKind
    cpu_standby: bool = False
    threads: int
    local_workers: str
    start_method: str
    options: LaneOptions
    notes: tuple[str, ...] = ()

    @property
    def ships_recipe(self) -> tuple[str, str] | None:
        """How the recipe travels to the primary CPU lane's workers, (serializer, where), or None
        when nothing is pickled."""
        if self.gpu and self.cpu_standby:
            return None  # the stand-by lane: threads in this process
        if self.cpu is LaneKind.CPU_ACTORS:
            return ("cloudpickle", "Ray actors")
        if self.local_workers != "processes" or self.start_method == "fork":
            return None  # threads, or processes forked from this one: nothing is pickled
        return ("pickle", "worker processes")

    @property
    def actor_fallback(self) -> bool:
        """The Ray lane runs beside a local stand-in that takes the batches while the cluster gives
        this rank no actor."""
        local = self.options.pool.on_no_actors == "local"
        return self.cpu is LaneKind.CPU_ACTORS and local and not (self.gpu and self.cpu_standby)

    @property
    def start_share(self) -> float:
        """The GPU share the loader starts with (for reporting)."""
        if not self.gpu:
            return 0.0
        return 1.0 if self.gpu_share is None else self.gpu_share


def budget_bytes(gpu_memory_budget_mb: float | None) -> int | None:
    """A budget in MiB as bytes (None: none): the one conversion, for the dispatcher and the GPU
    lane alike."""
    return None if gpu_memory_budget_mb is None else int(gpu_memory_budget_mb * 2**20)


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0
