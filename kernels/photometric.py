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

Identity parameters return the input unchanged.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from hybridload.ops import AutoContrast, Blur, Brightness, Contrast, Grayscale, Hue, Op, Posterize, Saturation, Solarize

GREY = (np.float32(0.299), np.float32(0.587), np.float32(0.114))


def _f32(img: torch.Tensor) -> np.ndarray:
    return img.numpy().astype(np.float32)


def _u8_trunc(y: np.ndarray) -> torch.Tensor:
    np.clip(y, 0, 255, out=y)
    return torch.from_numpy(y.astype(np.uint8))


def grey(x: np.ndarray) -> np.ndarray:
    """Float32 grey level (H x W) of an HWC float32 or uint8 image."""
    return x[..., 0] * GREY[0] + x[..., 1] * GREY[1] + x[..., 2] * GREY[2]


def _blend(x: np.ndarray, f: float, other) -> torch.Tensor:
    f32 = np.float32(f)
    return _u8_trunc(x * f32 + other * (np.float32(1.0) - f32))


def brightness(img: torch.Tensor, op: Brightness) -> torch.Tensor:
    if op.factor == 1.0:
        return img
    return _u8_trunc(_f32(img) * np.float32(op.factor))


def contrast(img: torch.Tensor, op: Contrast) -> torch.Tensor:
    if op.factor == 1.0:
        return img
    x = _f32(img)
    m = np.float32(grey(x).mean(dtype=np.float64))
    return _blend(x, op.factor, m)


def saturation(img: torch.Tensor, op: Saturation) -> torch.Tensor:
    if op.factor == 1.0:
        return img
    x = _f32(img)
    return _blend(x, op.factor, grey(x)[..., None])


def hue(img: torch.Tensor, op: Hue) -> torch.Tensor:
    if op.shift == 0.0:
        return img
    a = img.numpy()
    r, g, b = (a[..., c].astype(np.float32) for c in range(3))
    maxc, minc = np.maximum(np.maximum(r, g), b), np.minimum(np.minimum(r, g), b)
    cr = maxc - minc
    is_r = maxc == r
    is_g = (maxc == g) & ~is_r
    is_b = ~(is_r | is_g)
    num = np.where(is_r, g - b, np.where(is_g, b - r, r - g))
    off = np.float32(2) * is_g + np.float32(4) * is_b  # np.where with scalars is slow
    h6 = num / np.where(cr == 0, np.float32(1), cr) + off + np.float32(6 * op.shift)  # hue in sixths
    out = np.empty(a.shape, np.float32)
    for c, n in enumerate((5.0, 3.0, 1.0)):
        k = h6 + np.float32(n)
        k -= np.float32(6) * np.floor(k * np.float32(1 / 6))
        np.minimum(k, np.float32(4) - k, out=k)
        np.clip(k, 0, 1, out=k)
        out[..., c] = maxc - cr * k
    return _u8_trunc(out * np.float32(255.999 / 255))


def grayscale(img: torch.Tensor, op: Grayscale) -> torch.Tensor:
    if not op.apply:
        return img
    a = img.numpy()
    g = grey(a).astype(np.uint8)  # uint8 * float32 scalar: float32, as after a conversion
    out = np.empty(a.shape, np.uint8)
    out[...] = g[..., None]
    return torch.from_numpy(out)


def gaussian_kernel(ksize: int, sigma: float) -> np.ndarray:
    """torchvision's ``_get_gaussian_kernel1d`` (float32)."""
    half = (ksize - 1) * 0.5
    x = np.linspace(-half, half, ksize, dtype=np.float32)
    pdf = np.exp(np.float32(-0.5) * (x / np.float32(sigma)) ** 2)
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


def blur(img: torch.Tensor, op: Blur) -> torch.Tensor:
    w = gaussian_kernel(op.ksize, op.sigma)
    p = op.ksize // 2
    x = _f32(img)
    h, wd = x.shape[:2]
    y = _correlate(np.pad(x, ((p, p), (0, 0), (0, 0)), mode="reflect"), w, 0, h)
    y = _correlate(np.pad(y, ((0, 0), (p, p), (0, 0)), mode="reflect"), w, 1, wd)
    np.rint(y, out=y)
    return _u8_trunc(y)


def posterize(img: torch.Tensor, op: Posterize) -> torch.Tensor:
    if op.bits >= 8:
        return img
    return torch.from_numpy(img.numpy() & np.uint8((0xFF << (8 - op.bits)) & 0xFF))


def solarize(img: torch.Tensor, op: Solarize) -> torch.Tensor:
    a = img.numpy()
    return torch.from_numpy(np.where(a >= op.threshold, 255 - a, a).astype(np.uint8))


def autocontrast(img: torch.Tensor, op: AutoContrast) -> torch.Tensor:
    x = _f32(img)
    mn, mx = x.min(axis=(0, 1)), x.max(axis=(0, 1))
    flat = mx == mn
    scale = np.float32(255) / np.where(flat, np.float32(1), mx - mn)
    scale[flat], mn[flat] = 1, 0
    return _u8_trunc((x - mn) * scale)


#: The kernel of each photometric op type (merged into ``geometry.OP_FUNCTIONS``).
PHOTO_FUNCTIONS: dict[type, Callable[[torch.Tensor, Op], torch.Tensor]] = {
    Brightness: brightness, Contrast: contrast, Saturation: saturation, Hue: hue, Grayscale: grayscale,
    Blur: blur, Posterize: posterize, Solarize: solarize, AutoContrast: autocontrast}
