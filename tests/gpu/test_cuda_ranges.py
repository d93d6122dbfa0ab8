"""The GPU lane's NVTX ranges with the real ``torch.cuda.nvtx`` on a CUDA device: none while
nobody records; while a loader trace records, each batch's read, decode and augment pushed and
popped (the depth back where it began), and the trace shows the batch's read and decode spans
on the lane's row. tests/test_gpu_ranges.py holds the same logic on a CPU box with a stand-in."""

from __future__ import annotations

import json
import time

import pytest
import torch

from hybridload.execution._stats import LoaderStats
from hybridload.execution._trace import recording

from cuda_checks import cuda_fixture, gpu_photos_fixture, rec224_fixture  # noqa: F401 (fixtures)
from cuda_checks import NO_CUDA, host_images, spec_gpu_lane, tasks

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)]


class CountingNvtx:
    """``torch.cuda.nvtx`` itself, each push and pop also logged (the real ranges reach Nsight)."""

    def __init__(self, real):
        self.real, self.log, self.depths = real, [], []

    def range_push(self, name):
        self.log.append(name)
        depth = self.real.range_push(name)
        self.depths.append(depth)
        return depth

    def range_pop(self):
        self.log.append("pop")
        return self.real.range_pop()


def test_the_gpu_lanes_nvtx_ranges_are_real_ranges_while_a_trace_records(
    gpu_photos, rec224, cuda, monkeypatch, tmp_path, record_property
):
    nvtx = CountingNvtx(torch.cuda.nvtx)
    monkeypatch.setattr(torch.cuda, "nvtx", nvtx)
    lane = spec_gpu_lane(gpu_photos, rec224, 32, cuda)
    stats = LoaderStats()
    try:
        off, on = tasks(len(gpu_photos), 32, 4)[:2], tasks(len(gpu_photos), 32, 4)[2:]
        for task in off:
            host_images(lane.run_batch(task))
        assert nvtx.log == [], nvtx.log  # nobody records
        with recording(stats, tmp_path / "gpu.json") as tracer:
            for task in on:
                issued = time.perf_counter()
                result = lane.run_batch(task)
                host_images(result)
                tracer.batch(task.seq, lane.name, issued, time.perf_counter(), result, True)
    finally:
        lane.close()
    stages = ["hybridload.gpu.read", "pop", "hybridload.gpu.decode", "pop", "hybridload.gpu.augment", "pop"]
    assert nvtx.log == stages * len(on), nvtx.log
    assert all(d >= 0 for d in nvtx.depths), nvtx.depths  # NVTX took every push (a negative depth: not)
    spans = [e for e in json.loads((tmp_path / "gpu.json").read_text())["traceEvents"] if e.get("cat") == "work"]
    assert [(e["args"]["seq"], e["args"]["stage"]) for e in spans] == [
        (t.seq, s) for t in on for s in ("read", "decode+augment")
    ], spans
    record_property("ranges", len(nvtx.depths))
