"""Which device batches land on (as torch resolves it: ``"cuda"`` is the current device, never GPU 0
by default), and moving them there: pinned buffers and a side-stream copy that overlaps the
previous step, the consumer's stream waiting on a GPU lane's event on the device, never the host.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import torch

from hybridload import _environment as environment


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
        """A lane's BatchResult as device tensors (images, labels[, indices]), after its CUDA event."""
        tensors = [result.images, torch.from_numpy(result.labels)]
        if with_indices:
            tensors.append(torch.from_numpy(result.indices))
        return self(*tensors, ready=getattr(result, "ready", None))
