"""The solver's inputs: each node's CPU rate (`NodeRate`), what was measured (`Measurements`)
and what the split may not exceed (`Limits`); plain frozen data, checked on construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class NodeRate:
    """What one node's CPUs can decode for this loader.

    Attributes:
        node_id: the Ray node id ("local" for the trainer's machine without Ray).
        cpus: CPUs the loader may use there (on the trainer's node: after the reserve).
        per_core: images/s of the CPU kernels per core there.
        is_trainer: whether this is the training process's node.
    """

    node_id: str
    cpus: int
    per_core: float
    is_trainer: bool = False


@dataclass(frozen=True)
class Measurements:
    """Everything the solver knows, measured: the inputs of `solve`.

    Attributes:
        nodes: each node's CPU rate.
        gpu_rate: images/s of the GPU lane with the whole GPU.
        gpu_util: the training's own GPU utilization (0..1, from NVML).
        gpu_available: whether a GPU lane ran.
        gpu_cpu_cost: trainer-node cores the GPU lane takes at full rate.
        gpu_label: what ran the GPU lane, in words.
        gpu_time_bound: False for DALI's CPU-only stand-in, which takes no GPU time.
        notes: remarks for the plan's reader (a missing NVML, a stand-in).
    """

    nodes: tuple[NodeRate, ...] = ()
    gpu_rate: float = 0.0
    gpu_util: float = 0.0
    gpu_available: bool = False
    gpu_cpu_cost: float = 0.0
    gpu_label: str = "none"
    gpu_time_bound: bool = True
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        """Plain data for the plan file, where ``gpu_available`` means a real GPU (a stand-in: ``gpu_lane_measured``)."""
        d = asdict(self)
        d["nodes"] = [asdict(n) for n in self.nodes]
        d["gpu_lane_measured"] = self.gpu_available
        d["gpu_available"] = self.gpu_available and self.gpu_time_bound
        return d


@dataclass(frozen=True)
class Limits:
    """What the split may not exceed.

    Attributes:
        max_gpu_util: the GPU utilization the lane may push the GPU to, in (0, 1].
        demand: images/s the training consumes; None: as fast as possible.
        prefer: the order in which lanes are filled when they are equally good.
    """

    max_gpu_util: float = 0.9
    demand: float | None = None
    prefer: tuple[str, ...] = ("local", "gpu", "remote")

    def __post_init__(self):
        if not 0 < self.max_gpu_util <= 1:
            raise ValueError(f"Limits: max_gpu_util must be in (0, 1], got {self.max_gpu_util}")
        if self.demand is not None and self.demand <= 0:
            raise ValueError(f"Limits: demand must be positive images/s or None, got {self.demand}")
        if sorted(self.prefer) != ["gpu", "local", "remote"]:
            raise ValueError(f"Limits: prefer must order 'local', 'gpu' and 'remote', got {self.prefer}")
