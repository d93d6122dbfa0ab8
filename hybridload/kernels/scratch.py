"""Per-thread scratch arrays for the kernels' temporaries.

A fresh temporary of a few hundred kilobytes often comes from new pages (glibc hands large
blocks back to the system and maps them again), and touching new pages costs more than the
arithmetic on them: measured, the hue kernel on a 224 x 224 image took 0.5 ms with reused
arrays and 1.1 ms when its temporaries faulted in (about 400 page faults a call). Each
thread keeps the arrays of the last image size it saw (a new size drops them), and images
above `MAX_POOLED_PIXELS` get fresh arrays, so the memory held stays bounded.
"""

from __future__ import annotations

import threading

import numpy as np

#: Images with more pixels than this get fresh arrays (bounds the memory a thread keeps).
MAX_POOLED_PIXELS = 1 << 19


class _Pool(threading.local):
    def __init__(self) -> None:
        self.hw: tuple[int, int] | None = None
        self.arrays: dict[tuple, list[np.ndarray]] = {}


_POOL = _Pool()


def scratch(hw: tuple[int, int], shape: tuple[int, ...], dtype, count: int = 1) -> list[np.ndarray]:
    """``count`` uninitialised arrays of ``shape`` and ``dtype`` for an image of size ``hw``:
    the same arrays on every call from this thread (callers must not hold them across calls
    that ask for the same shape and dtype)."""
    if hw[0] * hw[1] > MAX_POOLED_PIXELS:
        return [np.empty(shape, dtype) for _ in range(count)]
    pool = _POOL
    if pool.hw != hw:
        pool.hw, pool.arrays = hw, {}
    got = pool.arrays.setdefault((tuple(shape), np.dtype(dtype).str), [])
    while len(got) < count:
        got.append(np.empty(shape, dtype))
    return got[:count]
