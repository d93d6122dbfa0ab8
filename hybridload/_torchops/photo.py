"""The photometric ops as torch functions on CHW uint8 tensors: ``_kernels/photometric.py``'s
formulas in float32 torch, differing only where rounding crosses an integer (tests/test_photometric.py).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from hybridload._kernels.grey import grey_mean_of_sums
from hybridload.recipe._ops import (
    AutoContrast,
    Blur,
    Brightness,
    Contrast,
    Grayscale,
    Hue,
    Posterize,
    Saturation,
    Solarize,
)

GREY = (0.299, 0.587, 0.114)


def _u8_trunc(y: torch.Tensor) -> torch.Tensor:
    return y.clamp_(0, 255).to(torch.uint8)


def grey(x: torch.Tensor) -> torch.Tensor:
    """Float32 grey level (H x W) of a CHW float32 image."""
    return x[0] * GREY[0] + x[1] * GREY[1] + x[2] * GREY[2]


def _blend(x: torch.Tensor, f: float, other) -> torch.Tensor:
    f32 = torch.tensor(f, dtype=torch.float32)
    return _u8_trunc(x * f32 + other * (1 - f32))


def brightness(img: torch.Tensor, op: Brightness) -> torch.Tensor:
    if op.factor == 1.0:
        return img
    return _u8_trunc(img.float() * torch.tensor(op.factor, dtype=torch.float32))


def contrast(img: torch.Tensor, op: Contrast) -> torch.Tensor:
    if op.factor == 1.0:
        return img
    s = img.sum(dim=(1, 2), dtype=torch.float64)  # exact channel sums, as the CPU kernel's mean_grey
    m = grey_mean_of_sums(s, img.shape[1] * img.shape[2]).float()
    return _blend(img.float(), op.factor, m)


def saturation(img: torch.Tensor, op: Saturation) -> torch.Tensor:
    if op.factor == 1.0:
        return img
    x = img.float()
    return _blend(x, op.factor, grey(x).unsqueeze(0))


def hue(img: torch.Tensor, op: Hue) -> torch.Tensor:
    if op.shift == 0.0:
        return img
    x = img.float()
    r, g, b = x[0], x[1], x[2]
    maxc, minc = torch.maximum(torch.maximum(r, g), b), torch.minimum(torch.minimum(r, g), b)
    cr = maxc - minc
    is_r, is_g = maxc == r, maxc == g
    f32: dict[str, Any] = {"dtype": torch.float32, "device": x.device}
    num = torch.where(is_r, g - b, torch.where(is_g, b - r, r - g))
    off = torch.where(
        is_r, torch.zeros((), **f32), torch.where(is_g, torch.full((), 2.0, **f32), torch.full((), 4.0, **f32))
    )
    h6 = num / torch.where(cr == 0, torch.ones((), **f32), cr) + off + torch.tensor(6 * op.shift, **f32)
    chans = []
    for n in (5.0, 3.0, 1.0):
        k = h6 + n
        k = k - 6 * torch.floor(k * torch.tensor(1 / 6, **f32))
        chans.append(maxc - cr * torch.clamp(torch.minimum(k, 4 - k), 0, 1))
    return _u8_trunc(torch.stack(chans) * torch.tensor(255.999 / 255, **f32))


def grayscale(img: torch.Tensor, op: Grayscale) -> torch.Tensor:
    if not op.apply:
        return img
    return grey(img.float()).to(torch.uint8).unsqueeze(0).expand(3, -1, -1).contiguous()


def gaussian_kernel(ksize: int, sigma: float, device=None) -> torch.Tensor:
    """torchvision's ``_get_gaussian_kernel1d`` (float32)."""
    half = (ksize - 1) * 0.5
    x = torch.linspace(-half, half, ksize, dtype=torch.float32, device=device)
    pdf = torch.exp(-0.5 * (x / sigma) ** 2)
    return pdf / pdf.sum()


def blur(img: torch.Tensor, op: Blur) -> torch.Tensor:
    w = gaussian_kernel(op.ksize, op.sigma, img.device)
    p = op.ksize // 2
    x = img.float().unsqueeze(0)  # 1, 3, H, W
    x = F.conv2d(F.pad(x, (0, 0, p, p), mode="reflect"), w.view(1, 1, -1, 1).expand(3, 1, -1, 1), groups=3)
    x = F.conv2d(F.pad(x, (p, p, 0, 0), mode="reflect"), w.view(1, 1, 1, -1).expand(3, 1, 1, -1), groups=3)
    return x[0].round_().clamp_(0, 255).to(torch.uint8)


def posterize(img: torch.Tensor, op: Posterize) -> torch.Tensor:
    if op.bits >= 8:
        return img
    return img & ((0xFF << (8 - op.bits)) & 0xFF)


def solarize(img: torch.Tensor, op: Solarize) -> torch.Tensor:
    return torch.where(img >= op.threshold, 255 - img, img)


def autocontrast(img: torch.Tensor, op: AutoContrast) -> torch.Tensor:
    x = img.float()
    mn, mx = x.amin(dim=(1, 2), keepdim=True), x.amax(dim=(1, 2), keepdim=True)
    flat = mx == mn
    scale = torch.full_like(mx, 255) / torch.where(flat, torch.ones_like(mx), mx - mn)  # scalar / tensor: inexact
    scale = torch.where(flat, torch.ones_like(scale), scale)
    mn = torch.where(flat, torch.zeros_like(mn), mn)
    return _u8_trunc((x - mn) * scale)


#: The torch function of each photometric op type.
PHOTO_FUNCTIONS: dict[type, Callable[[torch.Tensor, Any], torch.Tensor]] = {  # each takes its own op type
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
