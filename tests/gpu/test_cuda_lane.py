"""The torch GPU lane on a CUDA device, built through the lane spec as the loader builds it:
its pixels against the CPU lane, the index stream of mode gpu against mode cpu, batches on the
device ``torch.cuda.set_device`` chose, device memory flat over 150 batches and back after
``close()``. Each test records its figures (the GPU command's table shows them)."""

from __future__ import annotations


import numpy as np
import pytest
import torch

from hybridload.lanes._cpu_job import process_batch

from cuda_checks import cuda_fixture, gpu_photos_fixture, rec224_fixture  # noqa: F401 (fixtures)
from cuda_checks import NO_CUDA, host_images, quiet_loader, spec_gpu_lane, tasks

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)]

#: tests/test_gpu_path.py's stated tolerance on the CPU box is 0.2 (the same ops on CPU tensors);
#: nvJPEG's own rounding and chroma upsampling stay under the documented 0.5 on photos
MEAN_TOL = 0.5
#: device memory that may come and go between the 20th batch and the last (allocator rounding)
MEMORY_SLACK_MB = 64


def _lanes(ld) -> dict[str, int]:
    return {k: int(v.get("batches", 0)) for k, v in ld.stats()["lanes"].items()}


def _used_mb(device) -> float:
    """Device memory in use by everyone, as the driver sees it (nvJPEG's pools included)."""
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    return (total - free) / 2**20


def test_gpu_lane_pixels_match_the_cpu_lane(gpu_photos, rec224, cuda, record_property):
    lane = spec_gpu_lane(gpu_photos, rec224, 64, cuda)
    means = []
    try:
        for task in tasks(len(gpu_photos), 64, 4):
            got = host_images(lane.run_batch(task))
            want = process_batch(gpu_photos, rec224, task.indices, 0, 0).images
            assert got.shape == want.shape and got.dtype == torch.uint8
            means.append((got.int() - want.int()).abs().float().mean().item())
        engine = lane.describe()
    finally:
        lane.close()
    record_property("engine", engine)
    record_property("mean_abs_diff_max", round(max(means), 4))
    assert max(means) <= MEAN_TOL, f"{engine}: mean |diff| per batch {means} against the CPU lane"


def test_mode_gpu_delivers_the_index_stream_of_mode_cpu(gpu_photos, rec224, cuda, record_property):
    streams, ran = {}, {}
    for mode in ("cpu", "gpu"):
        with quiet_loader(gpu_photos, rec224, 32, cuda, mode=mode, gpu_engine="torch") as ld:
            streams[mode] = [idx.tolist() for _i, _l, idx in ld]
            ran[mode] = _lanes(ld)
    record_property("lanes", ran)
    assert ran["gpu"].get("gpu"), f"mode gpu ran no batch on the GPU lane (lanes: {ran['gpu']})"
    assert streams["gpu"] == streams["cpu"]


def test_batches_land_on_the_device_set_with_set_device(gpu_photos, rec224, record_property):
    k = torch.cuda.device_count() - 1
    before = torch.cuda.current_device()
    torch.cuda.set_device(k)
    try:
        with quiet_loader(gpu_photos, rec224, 16, "cuda", mode="gpu", gpu_engine="torch") as ld:
            images = next(iter(ld))[0]
    finally:
        torch.cuda.set_device(before)
    record_property("set_device", k)
    record_property("batch_on", str(images.device))
    assert images.device == torch.device("cuda", k)


def test_device_memory_stays_flat_over_150_batches_and_returns_after_close(gpu_photos, rec224, cuda, record_property):
    base = _used_mb(cuda)
    ld, at20, n = quiet_loader(gpu_photos, rec224, 64, cuda, mode="gpu", gpu_engine="torch"), None, 0
    epoch = 0
    while n < 150:
        ld.set_epoch(epoch)
        for _images, _labels, _idx in ld:
            n += 1
            if n == 20:
                at20 = _used_mb(cuda)
            if n >= 150:
                break
        epoch += 1
    at_end = _used_mb(cuda)
    gpu_batches = _lanes(ld).get("gpu", 0)
    ld.close()
    del _images, _labels, _idx
    torch.cuda.empty_cache()
    after = _used_mb(cuda)
    record_property("batches", n)
    record_property("gpu_batches", gpu_batches)
    record_property("at_20_mb", round(at20 - base, 1))
    record_property("at_150_mb", round(at_end - base, 1))
    record_property("after_close_mb", round(after - base, 1))
    assert gpu_batches, "the GPU lane ran no batch"
    assert at_end <= at20 + MEMORY_SLACK_MB, f"grew {at_end - at20:.0f} MiB from batch 20 to batch 150"
    assert after <= base + MEMORY_SLACK_MB, f"{after - base:.0f} MiB still held after close()"


def test_the_gpu_lane_is_built_from_the_spec_with_the_loaders_flags(gpu_photos, rec224, cuda):
    """uint8 out (delivery normalizes) and no host wait per batch (delivery waits on ``ready``)."""
    lane = spec_gpu_lane(gpu_photos, rec224, 8, cuda)
    try:
        result = lane.run_batch(tasks(len(gpu_photos), 8, 1)[0])
        assert result.images.dtype == torch.uint8 and result.images.device.type == "cuda"
        assert getattr(result, "ready", None) is not None, "a batch without its ready event"
    finally:
        lane.close()
    assert np.isfinite(host_images(result).float().mean().item())
