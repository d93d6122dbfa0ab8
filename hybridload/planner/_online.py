"""Online re-planning for ``LoaderPolicy(mode="auto")``: ``rebalance``, the pure rule, and
``OnlinePlanner``, the admission's `CapsHook` that feeds it live lane rates (the rule:
docs/guide/planner.md)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from hybridload.execution._admission import CapsHook

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaneSample:
    images: int
    busy_s: float
    parallelism: int

    @property
    def capacity(self) -> float:
        if self.busy_s <= 0 or self.images <= 0:
            return 0.0
        return self.images / self.busy_s * max(1, self.parallelism)


def rebalance(
    share: float,
    gpu: LaneSample,
    cpu: LaneSample,
    *,
    gpu_util: float | None = None,
    lane_util: float | None = None,
    max_gpu_util: float = 0.9,
    smoothing: float = 0.5,
    min_images: int = 32,
) -> float:
    """The next GPU share (0..1). Unchanged when either lane has too little evidence.

    ``gpu_util``: NVML's utilisation (0..1), trainer and lane together; ``lane_util``: the lane's
    own part of it (None: the whole overshoot is charged to the lane)."""
    if gpu.images < min_images and cpu.images < min_images:
        return share
    g, c = gpu.capacity, cpu.capacity
    if g <= 0 and c <= 0:
        return share
    target = g / (g + c) if (g + c) > 0 else share
    if gpu.images < min_images:  # the GPU lane was starved by its cap: probe upward a little
        target = max(target, min(1.0, share + 0.1))
    new = (1 - smoothing) * share + smoothing * target
    if gpu_util is not None and lane_util is None and gpu_util > max_gpu_util:
        # nothing known of the lane's own part: back off in proportion to the overshoot
        new = min(new, share * max(0.0, 1 - (gpu_util - max_gpu_util) / max(gpu_util, 1e-9)))
    elif gpu_util is not None and lane_util:
        lane = min(lane_util, gpu_util)
        budget = max(max_gpu_util - (gpu_util - lane), 1 - max_gpu_util)  # beside the trainer's own part
        if lane > budget:  # the training's GPU time comes first: back off to what the budget allows
            new = min(new, share * budget / lane)
    return min(1.0, max(0.0, new))


class OnlinePlanner(CapsHook):
    """mode="auto": every ``replan_every`` finished batches, the GPU lane's cap `rebalance` d.
    Called on the dispatcher's thread only, it changes the caps only by its answer (their one
    writer); ``history`` (the last 50 re-plans) is read by copying it."""

    def __init__(self, lanes, *, replan_every: int, max_gpu_util: float, monitor=None, clock=time.monotonic):
        from hybridload.lanes._base import LaneKind

        self._gpu = next((ln for ln in lanes if ln.kind is LaneKind.GPU), None)
        self._cpu = next((ln for ln in lanes if ln.kind is not LaneKind.GPU), None)
        self._every, self._max_util = replan_every, max_gpu_util
        self.monitor = monitor
        self.history: list[dict] = []
        self._batches = 0
        self._since: dict[str, tuple[int, float]] = {}  # lane name -> (images, busy s) since the last re-plan
        self._clock = clock
        self._window_start = clock()

    @classmethod
    def start(cls, lanes, replan_every: int, max_gpu_util: float, device) -> "OnlinePlanner":
        """A planner for ``lanes`` that reads NVML's utilisation of ``device`` (a torch.device)
        when it is a GPU."""
        from hybridload.planner._monitor import GpuMonitor

        monitor = GpuMonitor.start(device=device) if device.type == "cuda" else None
        return cls(lanes, replan_every=replan_every, max_gpu_util=max_gpu_util, monitor=monitor)

    def batch_done(self, seq: int, lane: str, images: int, seconds: float, caps: dict) -> dict | None:
        from hybridload.lanes._base import LaneKind

        img, busy = self._since.get(lane, (0, 0.0))
        self._since[lane] = (img + images, busy + seconds)
        self._batches += 1
        if self._batches % self._every or self._gpu is None or self._cpu is None:
            return None
        gpu, cpu = (self._sample(lane) for lane in (self._gpu, self._cpu))
        now = self._clock()
        wall, self._window_start, self._since = now - self._window_start, now, {}
        lane_util = min(1.0, gpu.busy_s / max(1, gpu.parallelism) / wall) if wall > 0 else None
        old = caps.get(LaneKind.GPU) or 0.0
        util = self.monitor.util if self.monitor is not None else None
        new = rebalance(old, gpu, cpu, gpu_util=util, lane_util=lane_util, max_gpu_util=self._max_util)
        if abs(new - old) < 0.01:
            return None
        self.history.append(
            {
                "batch": seq + 1,
                "from": round(old, 3),
                "to": round(new, 3),
                "gpu_capacity": round(gpu.capacity, 1),
                "cpu_capacity": round(cpu.capacity, 1),
                "gpu_util": util,
            }
        )
        del self.history[:-50]
        log.info(
            "auto mode: GPU share %.2f -> %.2f (GPU lane %.0f images/s, CPU lane %.0f images/s%s)",
            old,
            new,
            gpu.capacity,
            cpu.capacity,
            f", GPU busy {util:.0%}" if util is not None else "",
        )
        return {LaneKind.GPU: new}

    def _sample(self, lane) -> LaneSample:
        images, busy = self._since.get(lane.name, (0, 0.0))
        return LaneSample(images, busy, getattr(lane, "parallelism", 1))

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()
