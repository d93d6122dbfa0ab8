"""The colour ops on HWC uint8 images: the reference formulas every engine follows, a run of them
in one float32 round trip with the bits of op by op (the formulas: docs/guide/recipes.md, "The
colour ops' formulas")."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from hybridload.recipe._ops import (
    AutoContrast,
    Blur,
    Brightness,
    Contrast,
    Grayscale,
    Hue,
    Op,
    Posterize,
    Saturation,
    Solarize,
)

from hybridload._kernels.grey import GREY_MAX, grey_of, mean_grey, planes
from hybridload._kernels.scratch import scratch

F32 = np.float32
_ONE = F32(1.0)


def _trunc(y: np.ndarray) -> np.ndarray:
    np.clip(y, 0, 255, out=y)
    return np.floor(y, out=y)


def _fit(y: np.ndarray, ends: Sequence) -> np.ndarray:
    """``y``, whose values lie between the ``ends`` (float32 scalars), clamped just where
    needed for ``floor(y) == floor(clip(y, 0, 255))`` with ``y`` in [0, 256)."""
    low, high = min(ends) < 0, max(ends) >= 256
    if low or high:  # torch's clamp: the same values as np.clip, in half the time
        torch.from_numpy(y).clamp_(0 if low else None, 255 if high else None)
    return y


def brightness(x: np.ndarray, op: Brightness) -> np.ndarray:
    f = F32(op.factor)
    np.multiply(x, f, out=x)
    return _fit(x, (F32(0) * f, F32(255) * f))


def contrast(x: np.ndarray, op: Contrast) -> np.ndarray:
    f = F32(op.factor)
    other = mean_grey(x) * (_ONE - f)
    np.multiply(x, f, out=x)
    x += other
    return _fit(x, (F32(0) * f + other, F32(255) * f + other))  # x * f + other is monotonic in x


def saturation(x: np.ndarray, op: Saturation) -> np.ndarray:
    f = F32(op.factor)
    other = grey_of(x)
    other *= _ONE - f
    np.multiply(x, f, out=x)
    x += other
    return _fit(x, [F32(v) * f + g * (_ONE - f) for v in (0, 255) for g in (F32(0), GREY_MAX)])  # monotonic in each


def hue(x: np.ndarray, op: Hue) -> np.ndarray:
    r, g, b = x[0], x[1], x[2]
    maxc, cr, fr, fg, fb, h6, t, k = planes(x, 8)
    is_r, eq_g = planes(x, 2, bool)
    np.maximum(r, g, out=maxc)
    np.maximum(maxc, b, out=maxc)
    np.minimum(r, g, out=cr)
    np.minimum(cr, b, out=cr)
    np.subtract(maxc, cr, out=cr)
    # The max channel's sector as 0/1 planes (red first, then green): arithmetic on whole
    # numbers selects exactly and, unlike a masked or np.where select, costs the same on noise.
    np.equal(maxc, r, out=is_r)
    np.equal(maxc, g, out=eq_g)
    np.greater(eq_g, is_r, out=eq_g)
    np.copyto(fr, is_r)
    np.copyto(fg, eq_g)
    np.subtract(_ONE, fr, out=fb)
    fb -= fg
    np.subtract(g, b, out=h6)  # numerator: g - b (red max), b - r (green), r - g (blue)
    h6 *= fr
    np.subtract(b, r, out=t)
    t *= fg
    h6 += t
    np.subtract(r, g, out=t)
    t *= fb
    h6 += t
    h6 /= np.maximum(cr, _ONE, out=t)  # cr is a whole number: max(cr, 1) == where(cr == 0, 1, cr)
    fg *= F32(2)  # + 0 (red), 2 (green) or 4 (blue): the hue in sixths
    fb *= F32(4)
    fg += fb
    h6 += fg
    h6 += F32(6 * op.shift)
    for c, n in enumerate((5.0, 3.0, 1.0)):
        np.add(h6, F32(n), out=k)
        np.multiply(k, F32(1 / 6), out=t)
        np.floor(t, out=t)
        t *= F32(6)
        k -= t
        np.subtract(F32(4), k, out=t)
        np.minimum(k, t, out=k)
        torch.from_numpy(k).clamp_(0, 1)
        k *= cr
        np.subtract(maxc, k, out=x[c])  # in [min, max]: no clamp below
    x *= F32(255.999 / 255)  # < 256
    return x


def grayscale(x: np.ndarray, op: Grayscale) -> np.ndarray:
    x[...] = grey_of(x)  # in [0, GREY_MAX]: no clamp
    return x


def gaussian_kernel(ksize: int, sigma: float) -> np.ndarray:
    """torchvision's ``_get_gaussian_kernel1d`` (float32)."""
    half = (ksize - 1) * 0.5
    t = np.linspace(-half, half, ksize, dtype=np.float32)
    pdf = np.exp(F32(-0.5) * (t / F32(sigma)) ** 2)
    return (pdf / pdf.sum()).astype(np.float32)


def _correlate(xp: np.ndarray, w: np.ndarray, axis: int, n: int) -> np.ndarray:
    """Symmetric 1-D kernel along ``axis`` (1 or 2) of a padded (3, H, W) array; output length ``n``."""
    k = len(w)

    def tap(i):
        return xp[:, i : i + n] if axis == 1 else xp[:, :, i : i + n]

    acc = tap(k // 2) * w[k // 2]
    for i in range(k // 2):  # w[i] == w[k - 1 - i]: one multiply per pair of taps
        acc += (tap(i) + tap(k - 1 - i)) * w[i]
    return acc


def blur(x: np.ndarray, op: Blur) -> np.ndarray:
    w = gaussian_kernel(op.ksize, op.sigma)
    p = op.ksize // 2
    h, wd = x.shape[1:]
    y = _correlate(np.pad(x, ((0, 0), (p, p), (0, 0)), mode="reflect"), w, 1, h)
    y = _correlate(np.pad(y, ((0, 0), (0, 0), (p, p)), mode="reflect"), w, 2, wd)
    np.rint(y, out=y)
    return np.clip(y, 0, 255, out=y)


def posterize(x: np.ndarray, op: Posterize) -> np.ndarray:
    q = F32(2 ** (8 - op.bits))  # x & ~(q - 1) on integers; exact in float32
    return np.floor(x / q) * q


def solarize(x: np.ndarray, op: Solarize) -> np.ndarray:
    return np.where(x >= op.threshold, F32(255) - x, x)


def autocontrast(x: np.ndarray, op: AutoContrast) -> np.ndarray:
    mn, mx = x.min(axis=(1, 2)), x.max(axis=(1, 2))
    flat = mx == mn
    scale = F32(255) / np.where(flat, F32(1), mx - mn)
    scale[flat], mn[flat] = 1, 0
    return _trunc((x - mn[:, None, None]) * scale[:, None, None])


#: The float32 function of each photometric op type, on a (3, H, W) image whose floor is its result.
#: (Any: each function takes the op of the type it is registered under, found by ``type(op)``)
FLOAT_FUNCTIONS: dict[type, Callable[[np.ndarray, Any], np.ndarray]] = {
    Brightness: brightness,
    Contrast: contrast,
    Saturation: saturation,
    Hue: hue,
    Grayscale: grayscale,
    Blur: blur,
    Posterize: posterize,
    Solarize: solarize,
    AutoContrast: autocontrast,
}
#: Ops that work on each value alone, given per-image values (contrast's mean grey level from
#: `channel_sums`): they run on a view of HWC memory.
ELEMENTWISE = (Brightness, Contrast, Posterize, Solarize, AutoContrast)


def is_identity(op: Op) -> bool:
    """True for an op whose parameters change nothing."""
    if isinstance(op, (Brightness, Contrast, Saturation)):
        return op.factor == 1.0
    if isinstance(op, Hue):
        return op.shift == 0.0
    if isinstance(op, Grayscale):
        return not op.apply
    return isinstance(op, Posterize) and op.bits >= 8


def float_planes(a: np.ndarray, planar: bool) -> np.ndarray:
    """An HWC uint8 image as a scratch float32 (3, H, W) array: contiguous planes, or a view of HWC memory."""
    h, w, c = a.shape
    if not planar:
        (x,) = scratch((h, w), (h, w, c), np.float32)
        np.copyto(x, a)
        return x.transpose(2, 0, 1)
    (u8,) = scratch((h, w), (c, h, w), np.uint8)
    (x,) = scratch((h, w), (c, h, w), np.float32)
    np.copyto(u8, a.transpose(2, 0, 1))  # uint8 transpose, then a contiguous cast: faster than both at once
    np.copyto(x, u8)
    return x


def apply_photometric(img: torch.Tensor, ops: Sequence[Op]) -> torch.Tensor:
    """A run of colour ops on an HWC uint8 tensor: float32 once, uint8 once; returns an HWC
    view (of planar memory when the run mixes channels or blurs)."""
    ops = [op for op in ops if not is_identity(op)]
    if not ops:
        return img
    x = float_planes(img.numpy(), not all(isinstance(op, ELEMENTWISE) for op in ops))
    for k, op in enumerate(ops):
        if k:
            np.floor(x, out=x)
        x = FLOAT_FUNCTIONS[type(op)](x, op)
    return torch.from_numpy(x.astype(np.uint8)).permute(1, 2, 0)  # values in [0, 256): the cast truncates


def _single(img: torch.Tensor, op: Op) -> torch.Tensor:
    return apply_photometric(img, (op,))


#: The uint8 kernel of each photometric op type (merged into ``geometry.OP_FUNCTIONS``).
PHOTO_FUNCTIONS: dict[type, Callable[[torch.Tensor, Op], torch.Tensor]] = {t: _single for t in FLOAT_FUNCTIONS}
