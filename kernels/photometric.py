"""Photometric operations on HWC uint8 images: the reference formulas every engine follows.

numpy, vectorised over the whole image, float32 arithmetic, uint8 in and out; the
formulas are torchvision's (tensor path) except that grey levels use the weights
0.299 / 0.587 / 0.114 and stay in float32 for blends:

- ``Brightness(f)``: ``trunc(clip(x * f))``;
- ``Contrast(f)``: ``trunc(clip(x * f + m * (1 - f)))``, ``m`` the image's mean grey level;
- ``Saturation(f)``: the same with the pixel's grey level;
- ``Hue(s)``: torchvision's HSV shift in a branch-free form on 0..255 values: the hue in
  sixths ``h6`` (from the max channel, as ``_rgb2hsv``) plus ``6 s``; each channel
  ``max - (max - min) clip(min(k, 4 - k), 0, 1)``, ``k = (n + h6) mod 6`` (n = 5, 3, 1);
  then ``trunc(x * 255.999 / 255)`` as torchvision's float → uint8 conversion;
- ``Grayscale``: ``trunc(grey)`` in all three channels;
- ``Blur(k, sigma)``: torchvision's 1-D kernel, separable, reflect-101 border, rounded;
- ``Posterize``, ``Solarize``, ``AutoContrast``: torchvision's.

Each op is written on an integer-valued float32 image (``trunc`` as ``floor(clip(.))``, the
value a uint8 round trip would give), so a run of colour ops (:func:`apply_photometric`)
converts to float32 once and back to uint8 once, with the same bits as op by op.
Identity parameters leave the image unchanged.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from hybridload.ops import AutoContrast, Blur, Brightness, Contrast, Grayscale, Hue, Op, Posterize, Saturation, Solarize

GREY = (np.float32(0.299), np.float32(0.587), np.float32(0.114))
F32 = np.float32


def _trunc(y: np.ndarray) -> np.ndarray:
    np.clip(y, 0, 255, out=y)
    return np.floor(y, out=y)


def grey(x: np.ndarray) -> np.ndarray:
    """Float32 grey level (H x W) of an HWC float32 or uint8 image."""
    return x[..., 0] * GREY[0] + x[..., 1] * GREY[1] + x[..., 2] * GREY[2]


def _blend(x: np.ndarray, f: float, other) -> np.ndarray:
    return _trunc(x * F32(f) + other * (F32(1.0) - F32(f)))


def brightness(x: np.ndarray, op: Brightness) -> np.ndarray:
    return _trunc(x * F32(op.factor))


def contrast(x: np.ndarray, op: Contrast) -> np.ndarray:
    return _blend(x, op.factor, F32(grey(x).mean(dtype=np.float64)))


def saturation(x: np.ndarray, op: Saturation) -> np.ndarray:
    return _blend(x, op.factor, grey(x)[..., None])


def hue(x: np.ndarray, op: Hue) -> np.ndarray:
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    maxc, minc = np.maximum(np.maximum(r, g), b), np.minimum(np.minimum(r, g), b)
    cr = maxc - minc
    is_r = maxc == r
    is_g = (maxc == g) & ~is_r
    is_b = ~(is_r | is_g)
    num = np.where(is_r, g - b, np.where(is_g, b - r, r - g))
    off = F32(2) * is_g + F32(4) * is_b  # np.where with scalars is slow
    h6 = num / np.where(cr == 0, F32(1), cr) + off + F32(6 * op.shift)  # hue in sixths
    out = np.empty(x.shape, np.float32)
    for c, n in enumerate((5.0, 3.0, 1.0)):
        k = h6 + F32(n)
        k -= F32(6) * np.floor(k * F32(1 / 6))
        np.minimum(k, F32(4) - k, out=k)
        np.clip(k, 0, 1, out=k)
        out[..., c] = maxc - cr * k
    return _trunc(out * F32(255.999 / 255))


def grayscale(x: np.ndarray, op: Grayscale) -> np.ndarray:
    out = np.empty(x.shape, np.float32)
    out[...] = np.floor(grey(x))[..., None]
    return out


def gaussian_kernel(ksize: int, sigma: float) -> np.ndarray:
    """torchvision's ``_get_gaussian_kernel1d`` (float32)."""
    half = (ksize - 1) * 0.5
    t = np.linspace(-half, half, ksize, dtype=np.float32)
    pdf = np.exp(F32(-0.5) * (t / F32(sigma)) ** 2)
    return (pdf / pdf.sum()).astype(np.float32)


def _correlate(xp: np.ndarray, w: np.ndarray, axis: int, n: int) -> np.ndarray:
    """Symmetric 1-D kernel along ``axis`` of a padded array; output length ``n``."""
    k = len(w)

    def tap(i):
        return xp[i:i + n] if axis == 0 else xp[:, i:i + n]

    acc = tap(k // 2) * w[k // 2]
    for i in range(k // 2):  # w[i] == w[k - 1 - i]: one multiply per pair of taps
        acc += (tap(i) + tap(k - 1 - i)) * w[i]
    return acc


def blur(x: np.ndarray, op: Blur) -> np.ndarray:
    w = gaussian_kernel(op.ksize, op.sigma)
    p = op.ksize // 2
    h, wd = x.shape[:2]
    y = _correlate(np.pad(x, ((p, p), (0, 0), (0, 0)), mode="reflect"), w, 0, h)
    y = _correlate(np.pad(y, ((0, 0), (p, p), (0, 0)), mode="reflect"), w, 1, wd)
    np.rint(y, out=y)
    return np.clip(y, 0, 255, out=y)


def posterize(x: np.ndarray, op: Posterize) -> np.ndarray:
    q = F32(2 ** (8 - op.bits))  # x & ~(q - 1) on integers; exact in float32
    return np.floor(x / q) * q


def solarize(x: np.ndarray, op: Solarize) -> np.ndarray:
    return np.where(x >= op.threshold, F32(255) - x, x)


def autocontrast(x: np.ndarray, op: AutoContrast) -> np.ndarray:
    mn, mx = x.min(axis=(0, 1)), x.max(axis=(0, 1))
    flat = mx == mn
    scale = F32(255) / np.where(flat, F32(1), mx - mn)
    scale[flat], mn[flat] = 1, 0
    return _trunc((x - mn) * scale)


#: The float32 function of each photometric op type.
FLOAT_FUNCTIONS: dict[type, Callable[[np.ndarray, Op], np.ndarray]] = {
    Brightness: brightness, Contrast: contrast, Saturation: saturation, Hue: hue, Grayscale: grayscale,
    Blur: blur, Posterize: posterize, Solarize: solarize, AutoContrast: autocontrast}


def is_identity(op: Op) -> bool:
    """True for an op whose parameters change nothing."""
    if isinstance(op, (Brightness, Contrast, Saturation)):
        return op.factor == 1.0
    if isinstance(op, Hue):
        return op.shift == 0.0
    if isinstance(op, Grayscale):
        return not op.apply
    return isinstance(op, Posterize) and op.bits >= 8


def apply_photometric(img: torch.Tensor, ops: Sequence[Op]) -> torch.Tensor:
    """A run of colour ops on an HWC uint8 tensor: float32 once, uint8 once."""
    ops = [op for op in ops if not is_identity(op)]
    if not ops:
        return img
    x = img.numpy().astype(np.float32)
    for op in ops:
        x = FLOAT_FUNCTIONS[type(op)](x, op)
    return torch.from_numpy(x.astype(np.uint8))


def _single(img: torch.Tensor, op: Op) -> torch.Tensor:
    return apply_photometric(img, (op,))


#: The uint8 kernel of each photometric op type (merged into ``geometry.OP_FUNCTIONS``).
PHOTO_FUNCTIONS: dict[type, Callable[[torch.Tensor, Op], torch.Tensor]] = {t: _single for t in FLOAT_FUNCTIONS}
