"""Moving finished batches to the loader's device.

On CUDA, lanes fill pinned host buffers and the copy runs non-blocking on a side
stream; the consumer's stream waits on it, so the copy overlaps the previous step.
On CPU the tensors are returned as they are (no copy).
"""

from __future__ import annotations

import os

import torch


def default_device(device: str | torch.device | None) -> torch.device:
    """None → cuda:LOCAL_RANK when CUDA is available, else cpu."""
    if device is not None:
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    return torch.device("cpu")


class DeviceMover:
    """Copies tensors to ``device``; a no-op for CPU."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self._stream = torch.cuda.Stream(device=device) if self.cuda else None

    @property
    def pin_memory(self) -> bool:
        return self.cuda

    def __call__(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if not self.cuda:
            return tensors
        with torch.cuda.stream(self._stream):
            moved = tuple(t.to(self.device, non_blocking=True) for t in tensors)
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self._stream)
        for t in moved:
            t.record_stream(current)  # the caching allocator must not reuse it early
        return moved
