"""The GPU lane's NVTX ranges (`hybridload.lanes._gpu.ranges`): on only while a loader trace or
torch's profiler records on a CUDA device, and then around the read, the decode and the augment
of every batch, popped even when the decode fails.

This box has no CUDA: ``torch.cuda.nvtx`` is replaced by a recorder (a stand-in that logs each
push and pop) and, where the decision itself is under test, ``torch.cuda.is_available`` answers
True. The lane, its host preparation, its decode (the CPU kernels' decoder behind the torch
engine's contract) and the trace are real. tests/gpu/test_cuda_ranges.py runs the ranges with
the real ``torch.cuda.nvtx`` on the GPU machine."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hybridload import recipe, sources
from hybridload.execution._stats import LoaderStats
from hybridload.execution._trace import recording
from hybridload._kernels import decode_image
from hybridload.lanes._base import BatchTask
from hybridload.lanes._gpu import ranges
from hybridload.lanes._gpu.torch_lane import TorchGpuLane

CUDA = torch.device("cuda", 0)


class NvtxRecorder:
    """Stands in for ``torch.cuda.nvtx``: logs each ``range_push(name)`` and ``range_pop()``."""

    def __init__(self):
        self.log: list[str] = []

    def range_push(self, name):
        self.log.append(f"push {name}")
        return len(self.log)

    def range_pop(self):
        self.log.append("pop")
        return 0


def cpu_decode(datas):
    """The torch engine's decoder contract served by the CPU kernels (torchvision does not load here)."""
    return [torch.from_numpy(decode_image(d.numpy().tobytes())).permute(2, 0, 1) for d in datas]


@pytest.mark.parametrize(
    "tracing, profiling, cuda, want",
    [
        (False, False, True, False),  # nobody records: no range, whatever the device
        (True, False, True, True),
        (False, True, True, True),
        (True, True, False, False),  # no CUDA: nobody to show NVTX ranges to
    ],
)
def test_nvtx_ranges_are_wanted_only_while_someone_records_on_cuda(tracing, profiling, cuda, want):
    assert ranges.wanted(tracing, profiling, cuda) is want


def test_a_trace_or_torchs_profiler_turns_the_ranges_on_for_a_cuda_device_only(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the decision's input: this box has no CUDA
    assert not ranges.ranges_on(CUDA)
    with recording(LoaderStats(), tmp_path / "run.json"):
        assert ranges.ranges_on(CUDA) and not ranges.ranges_on(torch.device("cpu"))
    assert not ranges.ranges_on(CUDA)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert ranges.ranges_on(CUDA)
    assert not ranges.ranges_on(CUDA)


def _lane(photo_root, decode=cpu_decode):
    rec = recipe.imagenet_train(32)
    return TorchGpuLane(sources.ImageFolder(photo_root), rec, batch_size=4, device=torch.device("cpu"), decode=decode)


def test_the_gpu_lane_marks_read_decode_and_augment_as_nvtx_ranges_while_someone_records(photo_root, monkeypatch):
    nvtx = NvtxRecorder()
    monkeypatch.setattr(torch.cuda, "nvtx", nvtx)
    lane = _lane(photo_root)
    try:
        lane.run_batch(BatchTask(0, 0, np.arange(4)))  # nobody records: no range
        assert nvtx.log == []
        monkeypatch.setattr(ranges, "ranges_on", lambda device: True)  # as on CUDA while a trace records
        out = lane.run_batch(BatchTask(1, 0, np.arange(4, 8)))
    finally:
        lane.close()
    stages = ("read", "decode", "augment")
    assert nvtx.log == [x for s in stages for x in (f"push hybridload.gpu.{s}", "pop")], nvtx.log
    assert out.read_seconds is not None and 0 <= out.read_seconds <= out.seconds, (out.read_seconds, out.seconds)


def test_a_failing_decode_pops_its_nvtx_range(photo_root, monkeypatch):
    nvtx = NvtxRecorder()
    monkeypatch.setattr(torch.cuda, "nvtx", nvtx)
    monkeypatch.setattr(ranges, "ranges_on", lambda device: True)

    def decode(datas):
        raise RuntimeError("CUDA error: an illegal memory access was encountered (the test's)")

    lane = _lane(photo_root, decode)
    try:
        with pytest.raises(RuntimeError, match="the test's"):
            lane.run_batch(BatchTask(0, 0, np.arange(4)))
    finally:
        lane.close()
    assert nvtx.log == ["push hybridload.gpu.read", "pop", "push hybridload.gpu.decode", "pop"], nvtx.log
