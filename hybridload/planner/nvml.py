"""Reading the trainer's GPU through NVML (the ``pynvml`` module of nvidia-ml-py).

What NVML calls utilization is the fraction of the sample period during which at least
one kernel ran on the GPU — not SM occupancy. A GPU at "100%" may still have idle SMs;
a GPU at 40% is idle 60% of the time. The planner uses it as time headroom:
``max_gpu_util - utilization`` is the fraction of GPU time the loader may take.

The trainer's GPU is found by UUID: the CUDA device of this rank is entry
``LOCAL_RANK`` of CUDA_VISIBLE_DEVICES (an index or a ``GPU-...``/``MIG-...`` UUID);
when torch sees CUDA, its device UUID is used, which is exact whatever the CUDA device
order. No NVML library, no device, or a MIG instance → a :class:`GpuUnavailable`
saying why, and the plan goes on without the GPU.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class GpuReading:
    uuid: str
    name: str
    nvml_index: int
    util_mean: float          # 0..1, fraction of time a kernel ran, over the window
    util_max: float
    samples: int
    window_s: float
    mem_free_bytes: int
    mem_total_bytes: int
    decoder_util: float | None = None   # 0..1 where NVML reports it
    jpeg_util: float | None = None

    available = True

    def headroom(self, max_gpu_util: float) -> float:
        """Fraction of GPU time the loader may use under ``max_gpu_util``."""
        return max(0.0, max_gpu_util - self.util_mean)


@dataclass(frozen=True)
class GpuUnavailable:
    reason: str

    available = False

    def headroom(self, max_gpu_util: float) -> float:
        return 0.0


def _import_pynvml():
    import pynvml
    return pynvml


def visible_device_entry(env: dict | None = None) -> str | None:
    """This rank's entry of CUDA_VISIBLE_DEVICES (None when the variable is unset)."""
    env = os.environ if env is None else env
    local_rank = int(env.get("LOCAL_RANK", "0"))
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return None
    entries = [e.strip() for e in cvd.split(",") if e.strip()]
    if not entries:
        return ""
    return entries[local_rank % len(entries)]


def _torch_uuid(local_rank: int) -> str | None:
    try:
        import torch
        if not torch.cuda.is_available():
            return None
        u = str(torch.cuda.get_device_properties(local_rank % torch.cuda.device_count()).uuid)
        return u if u.startswith(("GPU-", "MIG-")) else f"GPU-{u}"
    except Exception:
        return None


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def read_gpu(window_s: float = 1.0, interval_s: float = 0.1, *, nvml: Any = None,
             env: dict | None = None, torch_uuid: Callable[[int], str | None] = _torch_uuid,
             sleep: Callable[[float], None] = time.sleep) -> GpuReading | GpuUnavailable:
    """Sample the trainer's GPU for ``window_s`` seconds (at least one second is advised).

    ``nvml``, ``env``, ``torch_uuid`` and ``sleep`` are injectable so the logic can be
    tested on recorded readings where no GPU exists.
    """
    env = os.environ if env is None else env
    try:
        nvml = nvml or _import_pynvml()
    except ImportError:
        return GpuUnavailable("pynvml is not installed (pip install nvidia-ml-py)")
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return GpuUnavailable(f"NVML is not usable here ({type(exc).__name__}: {exc}); no NVIDIA driver?")
    try:
        entry = visible_device_entry(env)
        if entry == "":
            return GpuUnavailable("CUDA_VISIBLE_DEVICES is empty: no GPU is visible to this process")
        local_rank = int(env.get("LOCAL_RANK", "0"))
        if entry is not None and entry.startswith("MIG-"):
            return GpuUnavailable(f"this process runs on MIG instance {entry}; NVML gives no utilization per "
                                  "MIG instance, so the plan goes on without the GPU")
        uuid = torch_uuid(local_rank)
        try:
            if uuid:
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid.encode() if isinstance(uuid, str) else uuid)
            elif entry is not None and entry.startswith("GPU-"):
                handle = nvml.nvmlDeviceGetHandleByUUID(entry.encode())
            else:
                count = nvml.nvmlDeviceGetCount()
                if count == 0:
                    return GpuUnavailable("NVML sees no GPU")
                index = int(entry) if entry is not None else local_rank
                if index >= count:
                    return GpuUnavailable(f"GPU index {index} is not among NVML's {count} devices")
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            return GpuUnavailable(f"NVML could not find the trainer's GPU ({type(exc).__name__}: {exc})")
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
            if current:
                return GpuUnavailable("MIG is enabled on the trainer's GPU; NVML gives no utilization per "
                                      "MIG instance, so the plan goes on without the GPU")
        except Exception:
            pass  # GPUs without MIG support raise NotSupported
        samples = []
        n = max(1, int(round(window_s / interval_s)))
        for k in range(n):
            samples.append(nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0)
            if k < n - 1:
                sleep(interval_s)
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        dec = _optional(nvml, "nvmlDeviceGetDecoderUtilization", handle)
        jpg = _optional(nvml, "nvmlDeviceGetJpgUtilization", handle)
        return GpuReading(uuid=_s(nvml.nvmlDeviceGetUUID(handle)), name=_s(nvml.nvmlDeviceGetName(handle)),
                          nvml_index=int(nvml.nvmlDeviceGetIndex(handle)),
                          util_mean=sum(samples) / len(samples), util_max=max(samples), samples=len(samples),
                          window_s=window_s, mem_free_bytes=int(mem.free), mem_total_bytes=int(mem.total),
                          decoder_util=dec, jpeg_util=jpg)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _optional(nvml, fn_name: str, handle) -> float | None:
    fn = getattr(nvml, fn_name, None)
    if fn is None:
        return None
    try:
        value = fn(handle)
        util = value[0] if isinstance(value, (tuple, list)) else value
        return float(util) / 100.0
    except Exception:
        return None
