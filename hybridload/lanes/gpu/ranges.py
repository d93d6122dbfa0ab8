"""NVTX ranges around the GPU lane's work, so Nsight Systems (and torch's profiler, which records
NVTX-marked CUDA work) shows the loader's read, decode and augment beside the model's kernels.

On only while someone looks: a loader trace records (`hybridload.execution.trace.recording`
counts itself in and out here) or torch's profiler records, and CUDA is available. Off, a
range is one flag read and a ``nullcontext``: the lane's batch pays nothing it can measure.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import torch

from hybridload.compat import torch_profiler_on

_lock = threading.Lock()
_recording = 0  # loader traces recording in this process


def trace_started() -> None:
    """A loader trace began recording in this process (the GPU lane's ranges turn on)."""
    global _recording
    with _lock:
        _recording += 1


def trace_ended() -> None:
    """A loader trace stopped recording."""
    global _recording
    with _lock:
        _recording = max(0, _recording - 1)


def wanted(tracing: bool, profiling: bool, cuda: bool) -> bool:
    """Whether the GPU lane marks its work with NVTX ranges: someone records and CUDA is there
    (NVTX without CUDA has nobody to show the ranges to, and ``torch.cuda.nvtx`` needs CUDA)."""
    return cuda and (tracing or profiling)


def ranges_on(device: torch.device) -> bool:
    """`wanted` for this moment: a trace recording, torch's profiler recording, a lane on a CUDA
    ``device`` of a machine where CUDA is available."""
    return wanted(_recording > 0, torch_profiler_on(), device.type == "cuda" and torch.cuda.is_available())


@contextlib.contextmanager
def nvtx_range(name: str, on: bool) -> Iterator[None]:
    """``name`` as an NVTX range of ``torch.cuda.nvtx`` (pushed on entry, popped on exit, even on
    an error) when ``on``.

    Args:
        name: the range's name in Nsight (``hybridload.gpu.read``, ``.decode``, ``.augment``).
        on: `ranges_on`'s answer, asked once per batch.
    """
    if not on:
        yield
        return
    marks = torch.cuda.nvtx  # looked up at the call: tests put a recorder in its place on a CPU box
    marks.range_push(name)
    try:
        yield
    finally:
        marks.range_pop()
