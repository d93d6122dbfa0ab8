"""The DALI engine's op table (`OP_FUNCTIONS`, `UNSUPPORTED`): each function adds its op's
operators to the fixed graph and takes the sample's values as graph inputs, the colour ops with
the formulas of ``_kernels/photometric.py``; importing it imports no DALI.
"""

from __future__ import annotations

from typing import Any, Callable

from hybridload.recipe._custom import CustomOp
from hybridload.recipe._ops import (
    AutoContrast,
    Blur,
    Brightness,
    Contrast,
    Crop,
    Flip,
    Grayscale,
    Hue,
    Posterize,
    Resize,
    Saturation,
    Solarize,
)


class Dali:
    """DALI's ``fn``, ``types`` and ``math`` modules, and the helpers every colour op shares."""

    def __init__(self, fn, types, dmath):
        self.fn, self.types, self.math = fn, types, dmath

    def trunc(self, x):
        return self.math.floor(self.math.clamp(x, 0.0, 255.0))

    def u8(self, x):
        return self.fn.cast(self.math.clamp(self.math.floor(x), 0.0, 255.0), dtype=self.types.UINT8)

    def grey(self, x):
        return x[:, :, 0:1] * 0.299 + x[:, :, 1:2] * 0.587 + x[:, :, 2:3] * 0.114

    def blend(self, x, f, other):
        return self.trunc(x * f + other * (1.0 - f))


# ------------------------------------------------------------------ the chain's geometric steps
def crop(d: Dali, img, anchor, shape, stage=None):
    """A crop after the first step (the first is decoded as a region: `builder`); zeros outside."""
    return d.fn.slice(
        img, anchor, shape, normalized_anchor=False, normalized_shape=False, out_of_bounds_policy="pad", fill_values=0
    )


def resize(d: Dali, img, size, stage=None):
    """Antialiased bilinear resize to ``size`` ([h, w]), uint8."""
    return d.fn.resize(img, size=size, antialias=True, interp_type=d.types.INTERP_LINEAR, dtype=d.types.UINT8)


def flip(d: Dali, img, mirror, layout: str):
    """The mirror (0 or 1 per sample), with the output layout: the chain's last step."""
    return d.fn.crop_mirror_normalize(img, mirror=mirror, dtype=d.types.UINT8, output_layout=layout)


# ------------------------------------------------------------------ colour ops on float32 HWC
def brightness(d: Dali, x, f, stage=None):
    return d.trunc(x * f)


def contrast(d: Dali, x, f, stage=None):
    return d.blend(x, f, d.fn.reductions.mean(d.grey(x)))


def saturation(d: Dali, x, f, stage=None):
    return d.blend(x, f, d.grey(x))


def hue(d: Dali, x, shift, stage=None):
    m = d.math
    r, g, b = x[:, :, 0:1], x[:, :, 1:2], x[:, :, 2:3]
    maxc, minc = m.max(m.max(r, g), b), m.min(m.min(r, g), b)
    cr = maxc - minc
    is_r, is_g = maxc == r, maxc == g
    not_r = maxc != r
    num = is_r * (g - b) + (is_g & not_r) * (b - r) + ((maxc != g) & not_r) * (r - g)
    off = (is_g & not_r) * 2.0 + ((maxc != g) & not_r) * 4.0
    h6 = num / (cr + (cr == 0.0)) + off + shift * 6.0
    chans = []
    for n in (5.0, 3.0, 1.0):
        k = h6 + n
        k = k - 6.0 * m.floor(k * (1 / 6))
        chans.append(maxc - cr * m.clamp(m.min(k, 4.0 - k), 0.0, 1.0))
    return d.trunc(d.fn.cat(*chans, axis=2) * (255.999 / 255))


def grayscale(d: Dali, x, apply, stage=None):
    g = d.math.floor(d.grey(x))
    return d.fn.cat(g, g, g, axis=2) * apply + x * (1.0 - apply)


def posterize(d: Dali, x, bits, stage=None):
    q = d.math.pow(2.0, 8.0 - d.math.clamp(bits, 1.0, 8.0))  # finite for any input: 0 * inf would be NaN
    return d.math.floor(x / q) * q


def solarize(d: Dali, x, threshold, stage=None):
    return x + (x >= threshold) * (255.0 - 2.0 * x)


def autocontrast(d: Dali, x, value=None, stage=None):
    mn, mx = d.fn.reductions.min(x, axes=[0, 1]), d.fn.reductions.max(x, axes=[0, 1])
    flat = mx == mn
    scale = (255.0 / (mx - mn + flat)) * (1.0 - flat) + flat
    return d.trunc((x - mn * (1.0 - flat)) * scale)


def blur(d: Dali, img, sigma, stage):
    """Gaussian blur of the uint8 image (`UINT8_OPS`), the stage's window, the sample's sigma."""
    return d.fn.gaussian_blur(img, window_size=stage.kernel_size, sigma=sigma)


#: The graph function of each op type.
OP_FUNCTIONS: dict[type, Callable[..., Any]] = {
    Crop: crop,
    Resize: resize,
    Flip: flip,
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
#: Each colour op's per-sample value, the graph input its function takes.
VALUES: dict[type, Callable[[Any], float]] = {
    Brightness: lambda op: op.factor,
    Contrast: lambda op: op.factor,
    Saturation: lambda op: op.factor,
    Hue: lambda op: op.shift,
    Grayscale: lambda op: float(op.apply),
    Blur: lambda op: op.sigma,
    Posterize: lambda op: float(op.bits),
    Solarize: lambda op: op.threshold,
    AutoContrast: lambda op: 0.0,
}
#: Colour ops that take the uint8 image instead of the float32 one.
UINT8_OPS = (Blur,)
#: Op types the DALI engine does not run, and why (their batches go to the CPU lanes).
UNSUPPORTED: dict[type, str] = {
    CustomOp: "a user's Python function runs in the CPU lanes only (a recipe holding one is not gpu_capable)"
}
