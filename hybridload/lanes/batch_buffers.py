"""Batch buffers that a lane writes (or copies) its batches into again, in the trainer's process,
once nothing holds them.

A fresh uint8 batch (32 x 3 x 224 x 224: 4.8 MB) made by a lane thread and freed by the
trainer's thread comes from new pages every batch: glibc gives the freed block back to the
system (the lane thread's arena trims it), so the next batch's writes fault its 1,176 pages in
again. Measured on one lane thread over the ImageNet-size photo set: 38 page faults per image,
0.07-0.13 ms per image (8-16% of the kernel), where the same kernel writing into one kept
buffer faults none. Torch's DataLoader pays the same on each collate.

A buffer is lent as a tensor over a view of its array (``torch.from_numpy``): the tensor's
storage holds that view, and so does every tensor or NumPy array made from the batch
(``images[0]``, ``images.numpy()``); the pool keeps a weak reference to the view only. While
anything reaches the view, the buffer is held; once it is gone, the buffer is written again.
A delivered batch is therefore never overwritten while the consumer can still read it. Like a
batch from torch's DataLoader workers (shared memory), its storage cannot grow in place
(``resize_`` to more elements raises); everything else about it is an ordinary tensor.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
import torch


def keep_for(slots: int) -> int:
    """Buffers worth keeping for a lane of ``slots``: the batches it can have out at once with the
    default window (two per slot: ``execution.stream.default_window``), plus the one the consumer
    holds and the one it is taking."""
    return 2 * slots + 2


class BatchBuffers:
    """At most ``keep`` uint8 buffers, each lent to one batch at a time.

    Args:
        keep: buffers kept for reuse (batches held at once beyond that get fresh memory, freed
            as before). A lane keeps about as many as it can have batches out: those it runs,
            those waiting in the reorder window and the one the consumer holds.
    """

    def __init__(self, keep: int):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError(f"BatchBuffers: keep must be an int >= 0, got {keep!r}")
        self.keep = keep
        self._lock = threading.Lock()
        self._kept: list[tuple[np.ndarray, weakref.ref | None]] = []  # (buffer, its lent view)

    def take(self, shape: tuple[int, ...]) -> torch.Tensor:
        """A uint8 tensor of ``shape`` (contents undefined): a kept buffer nothing holds, else new
        memory (kept when there is room: a new shape drops the kept buffers nothing holds)."""
        shape = tuple(int(n) for n in shape)
        with self._lock:
            for k, (arr, lent) in enumerate(self._kept):
                if arr.shape == shape and (lent is None or lent() is None):
                    return self._lend(k, arr)
            if any(arr.shape != shape for arr, _ in self._kept):
                self._kept = [(arr, lent) for arr, lent in self._kept if lent is not None and lent() is not None]
            arr = np.empty(shape, dtype=np.uint8)
            if len(self._kept) < self.keep:
                self._kept.append((arr, None))
                return self._lend(len(self._kept) - 1, arr)
        return torch.from_numpy(arr)

    def _lend(self, k: int, arr: np.ndarray) -> torch.Tensor:
        view = arr.view()
        self._kept[k] = (arr, weakref.ref(view))
        return torch.from_numpy(view)

    def held(self) -> int:
        """Kept buffers lent to a batch something still holds."""
        with self._lock:
            return sum(1 for _, lent in self._kept if lent is not None and lent() is not None)

    def clear(self) -> None:
        """Drop the kept buffers (those still held stay valid: their holders own them)."""
        with self._lock:
            self._kept = []
