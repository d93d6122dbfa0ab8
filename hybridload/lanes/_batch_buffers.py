"""Buffers a lane writes its batches into again once nothing holds them: a fresh 4.8 MB batch freed
on another thread comes back from the system every time, 38 page faults per image (0.07-0.13 ms,
8-16% of the kernel) that a kept buffer avoids. A buffer is lent as a tensor over a view the pool
holds weakly, so it is never overwritten while anything can still read the batch; like torch's
shared-memory batches, its storage cannot grow in place."""

from __future__ import annotations

import threading
import weakref

import numpy as np
import torch


def keep_for(slots: int) -> int:
    """Buffers worth keeping for a lane of ``slots``: two a slot (the default window), the one the
    consumer holds and the one it is taking."""
    return 2 * slots + 2


class BatchBuffers:
    """At most ``keep`` uint8 buffers, each lent to one batch at a time.

    Args:
        keep: buffers kept for reuse (batches beyond that get fresh memory).
    """

    def __init__(self, keep: int):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError(f"BatchBuffers: keep must be an int >= 0, got {keep!r}")
        self.keep = keep
        self._lock = threading.Lock()
        self._kept: list[tuple[np.ndarray, weakref.ref | None]] = []  # (buffer, its lent view)

    def take(self, shape: tuple[int, ...]) -> torch.Tensor:
        """A uint8 tensor of ``shape`` (contents undefined): a kept buffer nothing holds, else new
        memory (a new shape drops the free kept ones)."""
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

    def kept_bytes(self) -> int:
        """Bytes of the buffers kept so far, lent or free."""
        with self._lock:
            return sum(arr.nbytes for arr, _ in self._kept)

    def clear(self) -> None:
        """Drop the kept buffers (those still held stay valid: their holders own them)."""
        with self._lock:
            self._kept = []
