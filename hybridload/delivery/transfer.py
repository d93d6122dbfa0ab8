"""Which device batches land on, and moving finished batches there.

Device resolution follows torch: ``"cuda"`` without an index means the current CUDA
device (what ``torch.cuda.set_device`` chose, as DDP scripts do), never GPU 0 by
default; ``device=None`` means ``cuda:LOCAL_RANK`` under a launcher that sets it, else
the current CUDA device, else the CPU.

On CUDA, lanes fill pinned host buffers and the copy runs non-blocking on a side
stream; the consumer's stream waits on it, so the copy overlaps the previous step. A
batch made on the GPU carries the CUDA event its lane recorded (``result.ready``); the
consumer's current stream waits on that event (a device-side wait, no host sync), so a
trainer inside ``torch.cuda.stream(s)`` never reads unfinished pixels. On CPU the
tensors are returned as they are (no copy).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import torch

from hybridload import environment


def resolve_device(
    device: str | torch.device | None, *, env: Mapping[str, str] | None = None, cuda: Any = None
) -> torch.device:
    """The concrete device batches land on (a CUDA device always with its index).

    Args:
        device: "cuda", "cuda:1", "cpu", a torch device, or None (cuda:LOCAL_RANK when CUDA
            is available, else cpu).
        env: the environment to read ``LOCAL_RANK`` from (injectable for tests).
        cuda: a stand-in for ``torch.cuda`` (injectable for tests).
    """
    env = os.environ if env is None else env
    cuda = torch.cuda if cuda is None else cuda
    if device is None:
        if not cuda.is_available():
            return torch.device("cpu")
        local_rank = environment.local_rank(env)
        if local_rank is not None:
            return torch.device("cuda", local_rank % cuda.device_count())
        return torch.device("cuda", cuda.current_device())
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        return torch.device("cuda", cuda.current_device())
    return dev


def default_device(device: str | torch.device | None) -> torch.device:
    """The loader's device: see `resolve_device`.

    Args:
        device: as `resolve_device`.
    """
    return resolve_device(device)


def wait_for(ready: Any, stream: Any) -> None:
    """Make ``stream`` wait (on the device) for the event a lane recorded; None: nothing to wait for."""
    if ready is not None:
        stream.wait_event(ready)


class DeviceMover:
    """Copies tensors to ``device`` after what produced them; a no-op for CPU.

    Args:
        device: where batches land.
        cuda: a stand-in for ``torch.cuda`` in tests.
    """

    def __init__(self, device: torch.device, *, cuda: Any = None):
        self.device = device
        self.cuda = device.type == "cuda"
        self._cuda = torch.cuda if cuda is None else cuda
        self._stream = self._cuda.Stream(device=device) if self.cuda else None

    @property
    def pin_memory(self) -> bool:
        return self.cuda

    def __call__(self, *tensors: torch.Tensor, ready: Any = None) -> tuple[torch.Tensor, ...]:
        if not self.cuda:
            return tensors
        current = self._cuda.current_stream(self.device)
        wait_for(ready, current)  # pixels a GPU lane made on its own stream
        with self._cuda.stream(self._stream):
            moved = tuple(self._move(t) for t in tensors)
        current.wait_stream(self._stream)
        for t in moved:
            t.record_stream(current)  # the caching allocator must not reuse it early
        return moved

    def _move(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.device, non_blocking=True)

    def deliver(self, result, *, with_indices: bool = False) -> tuple[torch.Tensor, ...]:
        """A lane's BatchResult as device tensors: (images, labels[, indices]), ordered after
        the lane's CUDA event when it recorded one."""
        tensors = [result.images, torch.from_numpy(result.labels)]
        if with_indices:
            tensors.append(torch.from_numpy(result.indices))
        return self(*tensors, ready=getattr(result, "ready", None))
