"""Reading the loader's GPU through NVML (``pynvml``), found by UUID so that any device order
or CUDA_VISIBLE_DEVICES spelling reads the right one (how: docs/guide/planner.md)."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Mapping

from hybridload import _environment as environment
from hybridload.planner._gpu_reading import GpuReading as GpuReading
from hybridload.planner._gpu_reading import GpuUnavailable as GpuUnavailable


def _import_pynvml():
    import pynvml

    return pynvml


def visible_device_entry(env: Mapping[str, str] | None = None, cuda_index: int | None = None) -> str | None:
    """Entry ``cuda_index`` of CUDA_VISIBLE_DEVICES (default: LOCAL_RANK's); None when unset, "" when empty."""
    env = os.environ if env is None else env
    if cuda_index is None:
        cuda_index = environment.local_rank(env) or 0
    cvd = environment.visible_devices(env)
    if cvd is None:
        return None
    entries = [e.strip() for e in cvd.split(",") if e.strip()]
    if not entries:
        return ""
    return entries[cuda_index % len(entries)]


def _torch_uuid(cuda_index: int) -> str | None:
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return str(torch.cuda.get_device_properties(cuda_index % torch.cuda.device_count()).uuid)
    except Exception:
        return None


def _cuda_index(device: Any, env: Mapping[str, str]) -> int:
    """The CUDA ordinal of the loader's device (an index, a torch device, or None for the default)."""
    if isinstance(device, int):
        return device
    if device is not None:
        import torch

        dev = torch.device(device)
        if dev.index is not None:
            return dev.index
    try:
        from hybridload.delivery._transfer import resolve_device

        dev = resolve_device(device, env=env)
        if dev.type == "cuda" and dev.index is not None:
            return dev.index
    except Exception:
        pass
    return environment.local_rank(env) or 0


def _by_uuid(nvml, uuid: str):
    """NVML handle of a full UUID given with or without its GPU-/MIG- prefix; None when not found."""
    names = [uuid] if uuid.startswith(("GPU-", "MIG-")) else [f"GPU-{uuid}", f"MIG-{uuid}"]
    for name in names:
        try:
            return nvml.nvmlDeviceGetHandleByUUID(name.encode())
        except Exception:
            continue
    return None


def _by_uuid_prefix(nvml, prefix: str):
    """NVML handle of the one GPU whose UUID starts with ``prefix`` (CUDA accepts unique prefixes)."""
    handle = _by_uuid(nvml, prefix)
    if handle is not None:
        return handle
    matches = []
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        if _s(nvml.nvmlDeviceGetUUID(h)).startswith(prefix):
            matches.append(h)
    if len(matches) != 1:
        raise LookupError(f"CUDA_VISIBLE_DEVICES entry {prefix} matches {len(matches)} of NVML's GPUs")
    return matches[0]


def _is_mig(nvml, handle) -> bool:
    fn = getattr(nvml, "nvmlDeviceIsMigDeviceHandle", None)
    try:
        return bool(fn(handle)) if fn is not None else False
    except Exception:
        return False


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def read_gpu(
    window_s: float = 1.0,
    interval_s: float = 0.1,
    *,
    device: Any = None,
    nvml: Any = None,
    env: Mapping[str, str] | None = None,
    torch_uuid: Callable[[int], str | None] = _torch_uuid,
    sleep: Callable[[float], object] = time.sleep,
) -> GpuReading | GpuUnavailable:
    """Sample the loader's GPU (``device``) for ``window_s`` seconds (at least one second is advised).

    Args:
        window_s: how long to sample, in seconds.
        interval_s: the time between samples.
        device: the loader's device (``"cuda:1"``, an index, a torch device); None: the
            current CUDA device.
        nvml: the NVML module (injectable: tests pass recorded readings where no GPU exists).
        env: the environment to read ``CUDA_VISIBLE_DEVICES`` from; None: ``os.environ``.
        torch_uuid: maps a CUDA index to its UUID (injectable, as ``nvml``).
        sleep: the sleep function (injectable, as ``nvml``).
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
        cuda_index = _cuda_index(device, env)
        entry = visible_device_entry(env, cuda_index)
        if entry == "":
            return GpuUnavailable("CUDA_VISIBLE_DEVICES is empty: no GPU is visible to this process")
        if entry is not None and entry.startswith("MIG-"):
            return GpuUnavailable(
                f"this process runs on MIG instance {entry}; NVML gives no utilization per "
                "MIG instance, so the plan goes on without the GPU"
            )
        try:
            handle = _find_handle(nvml, entry, cuda_index, torch_uuid(cuda_index))
        except Exception as exc:
            return GpuUnavailable(f"NVML could not find the trainer's GPU ({type(exc).__name__}: {exc})")
        if handle is None:
            return GpuUnavailable("NVML sees no GPU")
        if _is_mig(nvml, handle):
            return GpuUnavailable(
                f"this process runs on MIG instance {_s(nvml.nvmlDeviceGetUUID(handle))}; NVML "
                "gives no utilization per MIG instance, so the plan goes on without the GPU"
            )
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
            if current:
                return GpuUnavailable(
                    "MIG is enabled on the trainer's GPU; NVML gives no utilization per "
                    "MIG instance, so the plan goes on without the GPU"
                )
        except Exception:
            pass  # GPUs without MIG support raise NotSupported
        samples = []
        n = max(1, int(round(window_s / interval_s)))
        for k in range(n):
            samples.append(nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0)
            if k < n - 1:
                sleep(interval_s)
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        return GpuReading(
            uuid=_s(nvml.nvmlDeviceGetUUID(handle)),
            name=_s(nvml.nvmlDeviceGetName(handle)),
            nvml_index=int(nvml.nvmlDeviceGetIndex(handle)),
            util_mean=sum(samples) / len(samples),
            util_max=max(samples),
            samples=len(samples),
            window_s=window_s,
            mem_free_bytes=int(mem.free),
            mem_total_bytes=int(mem.total),
            nvdec_util=_optional(nvml, "nvmlDeviceGetDecoderUtilization", handle),
            jpeg_util=_optional(nvml, "nvmlDeviceGetJpgUtilization", handle),
        )
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _find_handle(nvml, entry: str | None, cuda_index: int, uuid: str | None):
    """The NVML handle of CUDA device ``cuda_index``: torch's UUID, else its CUDA_VISIBLE_DEVICES entry,
    else the NVML index (which matches CUDA's order under CUDA_DEVICE_ORDER=PCI_BUS_ID)."""
    if uuid:
        handle = _by_uuid(nvml, uuid)
        if handle is not None:
            return handle
    if entry is not None and entry.startswith("GPU-"):
        return _by_uuid_prefix(nvml, entry)
    count = nvml.nvmlDeviceGetCount()
    if count == 0:
        return None
    index = int(entry) if entry is not None else cuda_index
    if index >= count:
        raise LookupError(f"GPU index {index} is not among NVML's {count} devices")
    return nvml.nvmlDeviceGetHandleByIndex(index)


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
