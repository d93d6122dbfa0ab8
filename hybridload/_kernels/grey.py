"""Grey levels and exact channel sums of float32 ``(3, H, W)`` images: one mean-grey formula
(`grey_mean_of_sums`) for every engine, with no grey image."""

from __future__ import annotations

import numpy as np

from hybridload._kernels.scratch import scratch

GREY = (np.float32(0.299), np.float32(0.587), np.float32(0.114))
GREY64 = tuple(float(v) for v in GREY)
F32 = np.float32


def grey(x: np.ndarray, out: np.ndarray | None = None, tmp: np.ndarray | None = None) -> np.ndarray:
    """Float32 grey level (H x W) of a ``(3, H, W)`` image: ``(R a + G b) + B c``."""
    out = np.multiply(x[0], GREY[0], out=out)
    tmp = np.multiply(x[1], GREY[1], out=tmp)
    out += tmp
    out += np.multiply(x[2], GREY[2], out=tmp)
    return out


def planes(x: np.ndarray, count: int, dtype=np.float32) -> list[np.ndarray]:
    """``count`` scratch (H, W) arrays for the (3, H, W) image ``x`` (see `scratch`)."""
    return scratch(x.shape[1:], x.shape[1:], dtype, count)


def grey_of(x: np.ndarray) -> np.ndarray:
    """`grey` into a scratch plane (the second scratch plane is overwritten too)."""
    g, t = planes(x, 2)
    return grey(x, g, t)


#: The largest grey level of a 0..255 image (grey is non-decreasing in each channel).
GREY_MAX = grey(np.full((3, 1, 1), 255, np.float32))[0, 0]


#: Values a row of `channel_sums` adds at once (a multiple of 3: a column is one channel).
_ROW = 768


def channel_sums(x: np.ndarray) -> np.ndarray:
    """The exact per-channel sums (float64) of an integer-valued 0..255 ``(3, H, W)`` image, summed
    as rows of `_ROW` values (float32 column sums are exact below 2^24): no strided pass."""
    hwc = x.transpose(1, 2, 0)
    if not hwc.flags.c_contiguous:
        return x.reshape(3, -1).sum(axis=1, dtype=np.float64)
    flat = hwc.reshape(-1)
    n = flat.size - flat.size % _ROW
    exact32 = (n // _ROW) * 255 < 1 << 24
    columns = flat[:n].reshape(-1, _ROW).sum(axis=0, dtype=np.float32 if exact32 else np.float64)
    sums = columns.reshape(-1, 3).sum(axis=0, dtype=np.float64)
    if n < flat.size:
        sums += flat[n:].reshape(-1, 3).sum(axis=0, dtype=np.float64)
    return sums


def grey_mean_of_sums(s, pixels: int):
    """``(0.299 S_R + 0.587 S_G + 0.114 S_B) / pixels`` in float64: every engine's mean grey level."""
    w = GREY64
    return (w[0] * s[0] + w[1] * s[1] + w[2] * s[2]) / pixels


def mean_grey(x: np.ndarray) -> np.float32:
    """The image's mean grey level (`grey_mean_of_sums`) as float32, with no grey image."""
    return F32(grey_mean_of_sums(channel_sums(x), x.shape[1] * x.shape[2]))
