"""Concrete per-sample operations, typed: the one list a recipe gives each image, which every
engine applies in order with one function per op type (adding one: CONTRIBUTING.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True)
class Crop:
    """Integer box ``(x, y, w, h)`` in the current image; parts outside read as zeros."""

    x: int
    y: int
    w: int
    h: int


@dataclass(frozen=True)
class Resize:
    """Antialiased bilinear resize to ``h`` x ``w``."""

    h: int
    w: int


@dataclass(frozen=True)
class Flip:
    """Left-right mirror."""


# ------------------------------------------------------------------ photometric ops
# uint8 in, uint8 out; formulas in _kernels/photometric.py (the reference every engine follows).


@dataclass(frozen=True)
class Brightness:
    """``trunc(clip(factor * x))``: a blend with black (factor 1 is the identity)."""

    factor: float


@dataclass(frozen=True)
class Contrast:
    """A blend with the image's mean grey level (0.299 R + 0.587 G + 0.114 B)."""

    factor: float


@dataclass(frozen=True)
class Saturation:
    """A blend with the pixel's grey level (factor 0 is greyscale)."""

    factor: float


@dataclass(frozen=True)
class Hue:
    """Shift the HSV hue by ``shift`` turns (in [-0.5, 0.5]; 0 is the identity)."""

    shift: float


@dataclass(frozen=True)
class Grayscale:
    """Replace RGB by the truncated grey level, in all three channels, when ``apply``."""

    apply: bool = True


@dataclass(frozen=True)
class Blur:
    """Gaussian blur: odd ``ksize``, ``sigma`` in pixels; reflect-101 border; rounded."""

    ksize: int
    sigma: float


@dataclass(frozen=True)
class Posterize:
    """Keep the top ``bits`` bits of each value."""

    bits: int


@dataclass(frozen=True)
class Solarize:
    """Invert the values at or above ``threshold``."""

    threshold: float


@dataclass(frozen=True)
class AutoContrast:
    """Stretch each channel's [min, max] to [0, 255] (a flat channel is left as it is)."""


PHOTOMETRIC = (Brightness, Contrast, Saturation, Hue, Grayscale, Blur, Posterize, Solarize, AutoContrast)


@dataclass(frozen=True)
class Slot:
    """One position of a stage's per-sample op list, the same for every sample: what an engine
    compiles a fixed graph from (a stage's ``op_slots()``, in the order ``sample_ops`` emits).

    Attributes:
        types: the op types the position may hold; more than one: one of them drawn per sample.
        optional: some samples emit no op here (a flip not drawn, a crop of the whole image).
        identity: its op never changes the image (a ColorJitter factor left off): may be skipped.
    """

    types: tuple[type, ...]
    optional: bool = False
    identity: bool = False


Op = Union[
    Crop, Resize, Flip, Brightness, Contrast, Saturation, Hue, Grayscale, Blur, Posterize, Solarize, AutoContrast
]

__all__ = [
    "Crop",
    "Resize",
    "Flip",
    "Brightness",
    "Contrast",
    "Saturation",
    "Hue",
    "Grayscale",
    "Blur",
    "Posterize",
    "Solarize",
    "AutoContrast",
    "PHOTOMETRIC",
    "Op",
    "Slot",
]
