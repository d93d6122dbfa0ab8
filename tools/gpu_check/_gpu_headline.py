"""gpu_check's headline figures and records: the raw nvJPEG ceiling against the GPU lane
alone, which lane ran each loader measurement, and the environment.

* Raw ceiling: the decoder's batched call on a list of ``batch`` JPEGs (256 by default) on
  the device, alone, then with the same crop + resize per image the lane applies; the GPU
  lane alone (``run_batch`` back to back, built as the loader builds it) at the same batch
  size; their ratio is what the lane's host side and its ops cost (goal >= 0.9).
* Lane record: ``stats()["lanes"]`` after each loader measurement, so a silent fallback to
  the CPU lane is never reported as a GPU figure (:func:`gpu_figure`).
* Environment: versions, whether torchvision's image extension loaded, the driver, the CPU
  model and /dev/shm's size (nvJPEG's hardware backend shows as NVML's JPEG engine
  utilisation during the raw decode).
"""

from __future__ import annotations

import platform
import shutil
import time

import numpy as np
import torch


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def host_images(result) -> torch.Tensor:
    """A lane result's images on the host, after its ``ready`` event (a lane built as the loader
    builds it does not wait for its own work: its pixels are final only once the event has run)."""
    ready = getattr(result, "ready", None)
    if ready is not None:
        ready.synchronize()
    return result.images.cpu()


def lanes_used(stats: dict) -> dict[str, int]:
    """{lane name: batches} from a loader's ``stats()``."""
    return {k: int(v.get("batches", 0)) for k, v in stats.get("lanes", {}).items()}


def gpu_figure(rate: float, lanes: dict[str, int], mode: str, share: float | None = None) -> dict:
    """A loader measurement with the lanes that ran it; a GPU-mode figure the GPU lane took no
    batch of is withheld (``img_s`` None), never reported as the GPU lane's. A split at share 0
    gives the GPU lane nothing by design: its figure is the CPU lane's, and stands."""
    record = {"img_s": rate, "lanes": lanes}
    if mode in ("gpu", "split", "auto") and not lanes.get("gpu") and not (mode == "split" and share == 0.0):
        record.update(
            img_s=None, measured_img_s=rate, note=f"the GPU lane ran no batch (lanes: {lanes}): not a GPU figure"
        )
    return record


def raw_ceiling(payloads: list[bytes], decode, params, device, reps: int = 5) -> dict:
    """Images/s of the decoder alone on the list, and of decode + each sample's ops (``params``)."""
    from hybridload._torchops.ops import apply_ops, stack

    datas = [torch.frombuffer(bytearray(p), dtype=torch.uint8) for p in payloads]
    decode(datas)  # warm: the decoder's set-up is not the ceiling
    sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        decode(datas)
    sync(device)
    dec = reps * len(datas) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(reps):
        stack([apply_ops(img, p.ops) for img, p in zip(decode(datas), params)])
    sync(device)
    both = reps * len(datas) / (time.perf_counter() - t0)
    return {"images": len(datas), "reps": reps, "raw_decode_img_s": dec, "raw_decode_resize_img_s": both}


def run_as_dispatched(lane, tasks) -> list:
    """The lane's batches one after another as the dispatcher hands them over with two in flight:
    each task accepted (``runner``: its host preparation starts) while the one before runs."""
    out = []
    if tasks:
        lane.runner(tasks[0])
    for k, t in enumerate(tasks):
        if k + 1 < len(tasks):
            lane.runner(tasks[k + 1])
        out.append(lane.run_batch(t))
    return out


def lane_alone(lane, n_images: int, bs: int, batches: int, device, warm: int = 2) -> float:
    """Images/s of the lane fed as the dispatcher feeds it (:func:`run_as_dispatched`), after ``warm``."""
    from hybridload.lanes._base import BatchTask

    tasks = [BatchTask(k, 0, np.arange(k * bs, (k + 1) * bs) % n_images) for k in range(warm + batches)]
    run_as_dispatched(lane, tasks[:warm])
    sync(device)
    t0 = time.perf_counter()
    results = run_as_dispatched(lane, tasks[warm:])
    sync(device)
    del results
    return batches * bs / (time.perf_counter() - t0)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def shm_gb() -> float | None:
    try:
        return shutil.disk_usage("/dev/shm").total / 2**30
    except OSError:
        return None


def driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # no NVML here: said, not failed
        return f"unavailable ({type(exc).__name__})"


def decoder_record() -> dict:
    """torchvision's and torchcodec's versions, and whether torchvision's image extension loaded."""
    out: dict = {}
    try:
        import torchvision

        out["torchvision"] = torchvision.__version__
        try:
            out["torchvision_image_extension"] = hasattr(torch.ops.image, "decode_jpegs_cuda")
        except Exception as exc:
            out["torchvision_image_extension"] = f"not loaded ({type(exc).__name__}: {exc})"[:200]
    except Exception as exc:
        out["torchvision"] = f"not installed ({type(exc).__name__})"
    try:
        import torchcodec

        out["torchcodec"] = getattr(torchcodec, "__version__", "installed")
    except Exception as exc:
        out["torchcodec"] = f"not installed ({type(exc).__name__})"
    return out


def environment_record(device) -> dict:
    return {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        **decoder_record(),
        "driver": driver_version(),
        "cpu_model": cpu_model(),
        "dev_shm_gb": shm_gb(),
        "python": platform.python_version(),
    }


def spec_lane(src, rec, bs: int, device):
    """The torch engine's GPU lane built as the loader builds it: ``LoaderPolicy.lane_spec``,
    then ``build_lanes`` (the stand-by CPU lane closed); RuntimeError naming why when the spec
    builds no GPU lane here."""
    from hybridload import LoaderPolicy
    from hybridload.lanes._base import LaneKind
    from hybridload.lanes._build import build_lanes, close_lanes

    spec = LoaderPolicy(mode="gpu", gpu_engine="torch", cpu_actors=0).lane_spec(device=device, recipe=rec)
    built = build_lanes(spec, src, rec, batch_size=bs, device=torch.device(device), pin_memory=False)
    gpu = [lane for lane in built.lanes if lane.kind is LaneKind.GPU]
    close_lanes([lane for lane in built.lanes if lane.kind is not LaneKind.GPU])
    if not gpu:
        raise RuntimeError("the lane spec built no GPU lane here (the warning above says why)")
    return gpu[0]
