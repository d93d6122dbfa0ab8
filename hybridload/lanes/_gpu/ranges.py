"""NVTX ranges around the GPU lane's read, decode and augment, so Nsight Systems and torch's
profiler show them beside the model's kernels; on only while a loader trace or the profiler records
on CUDA, else one flag read."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import torch

from hybridload._compat import torch_profiler_on

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
    """Whether the GPU lane marks its work: someone records and CUDA is there (``torch.cuda.nvtx``
    needs it)."""
    return cuda and (tracing or profiling)


def ranges_on(device: torch.device) -> bool:
    """`wanted` for this moment: a trace recording, torch's profiler recording, a lane on a CUDA
    ``device`` of a machine where CUDA is available."""
    return wanted(_recording > 0, torch_profiler_on(), device.type == "cuda" and torch.cuda.is_available())


@contextlib.contextmanager
def nvtx_range(name: str, on: bool) -> Iterator[None]:
    """``name`` as a ``torch.cuda.nvtx`` range when ``on``, popped even on an error.

    Args:
        name: the range's name in Nsight.
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
