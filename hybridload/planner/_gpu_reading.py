"""What NVML read of the trainer's GPU (`GpuReading`), or why not (`GpuUnavailable`); which
engine each utilization is: docs/guide/planner.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal


@dataclass(frozen=True)
class GpuReading:
    """NVML's reading of the loader's GPU over a window.

    Attributes:
        uuid: the GPU's (or MIG instance's) UUID.
        name: the product name.
        nvml_index: NVML's index of the device.
        util_mean: 0..1, the fraction of time a kernel ran, averaged over the window.
        util_max: the highest sample in the window.
        samples: how many samples were read.
        window_s: the window's length in seconds.
        mem_free_bytes: device memory free.
        mem_total_bytes: device memory in all.
        nvdec_util: 0..1, the NVDEC video decoders (NVML's "decoder"; JPEG decoding does not use them), where reported.
        jpeg_util: 0..1, the NVJPG hardware JPEG engine, where reported.
    """

    uuid: str
    name: str
    nvml_index: int
    util_mean: float
    util_max: float
    samples: int
    window_s: float
    mem_free_bytes: int
    mem_total_bytes: int
    nvdec_util: float | None = None
    jpeg_util: float | None = None

    #: the tag a caller branches on (`GpuUnavailable`'s is False); mypy narrows the union by it
    available: ClassVar[Literal[True]] = True

    @property
    def decoder_util(self) -> float | None:
        """NVML's "decoder" utilization: NVDEC, the video decoders (an alias of ``nvdec_util``)."""
        return self.nvdec_util

    def engine_utils(self) -> dict[str, float]:
        """The decode engines' utilizations NVML reported, under labels that say what they are."""
        out = {}
        if self.nvdec_util is not None:
            out["NVDEC (video decode)"] = self.nvdec_util
        if self.jpeg_util is not None:
            out["NVJPG (JPEG decode)"] = self.jpeg_util
        return out

    def headroom(self, max_gpu_util: float) -> float:
        """Fraction of GPU time the loader may use under ``max_gpu_util``."""
        return max(0.0, max_gpu_util - self.util_mean)


@dataclass(frozen=True)
class GpuUnavailable:
    """No reading: why (no NVML library, no driver, no device visible, ...).

    Attributes:
        reason: the cause, in words.
    """

    reason: str

    available: ClassVar[Literal[False]] = False

    def headroom(self, max_gpu_util: float) -> float:
        return 0.0
