"""Online re-planning for ``LoaderPolicy(mode="auto")``: the GPU share from live lane rates.

Pure math here; the loader feeds it what its lanes did since the last re-plan.
A lane's capacity is what it produced per second of busy time, times the number of
tasks it runs at once. The new share moves halfway from the current one toward
``gpu / (gpu + cpu)``, and never past what NVML says the GPU has left under
``max_gpu_util``.
"""

from __future__ import annotations

from dataclasses import dataclass


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


def rebalance(share: float, gpu: LaneSample, cpu: LaneSample, *, gpu_util: float | None = None,
              max_gpu_util: float = 0.9, smoothing: float = 0.5, min_images: int = 32) -> float:
    """The next GPU share (0..1). Unchanged when either lane has too little evidence."""
    if gpu.images < min_images and cpu.images < min_images:
        return share
    g, c = gpu.capacity, cpu.capacity
    if g <= 0 and c <= 0:
        return share
    target = g / (g + c) if (g + c) > 0 else share
    if gpu.images < min_images:  # the GPU lane was starved by its cap: probe upward a little
        target = max(target, min(1.0, share + 0.1))
    new = (1 - smoothing) * share + smoothing * target
    if gpu_util is not None and gpu_util > max_gpu_util:
        # the training's GPU time comes first: back off in proportion to the overshoot
        new = min(new, share * max(0.0, 1 - (gpu_util - max_gpu_util) / max(gpu_util, 1e-9)) )
    return min(1.0, max(0.0, new))
