"""Recipe stages: frozen, validated declarations whose ``sample_ops(hw, rng)`` draw from the
sample's keyed generator only, so every engine cuts the same boxes; ``op_slots()`` names the op
types each emits, which the engines compile."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable, Union

import numpy as np

from hybridload.recipe import _ops as O
from hybridload.recipe._ops import Op

Size = Union[int, tuple[int, int]]


def _check_size(stage: str, size, *, allow_int: bool = True) -> tuple[int, int] | int:
    if isinstance(size, bool):
        raise ValueError(f"{stage}: size must be a positive int or an (height, width) pair, got {size!r}")
    if isinstance(size, (int, np.integer)):
        if not allow_int or size <= 0:
            raise ValueError(f"{stage}: size must be a positive int or an (height, width) pair, got {size!r}")
        return int(size)
    if (
        isinstance(size, (tuple, list))
        and len(size) == 2
        and all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s > 0 for s in size)
    ):
        return (int(size[0]), int(size[1]))
    raise ValueError(f"{stage}: size must be a positive int or an (height, width) pair, got {size!r}")


def size_hw(size: int | tuple[int, int]) -> tuple[int, int]:
    """``size`` as (height, width): an int is a square."""
    return (size, size) if isinstance(size, int) else size


HW = tuple[int, int]
Rng = Callable[[], np.random.Generator]  # the sample's generator, created on first use


@dataclass(frozen=True)
class Decode:
    """Decode encoded bytes (JPEG, PNG, ...) into an RGB uint8 image. Must come first.

    Attributes:
        dct_scaling: True: the CPU lanes decode a JPEG at 1/2, 1/4 or 1/8 size in the DCT
            domain where the sample's crop keeps enough pixels (faster on large photos, pixels
            off the full decode by about 1 grey level; the GPU engines always decode fully).
            False (the default): always the full decode. Figures: the recipes page.
        crop_window: True (the default): the CPU lanes decode only a sample's crop window of a
            JPEG (libjpeg-turbo 3's cropping region), pixels identical to the full decode's crop;
            the full decode where it cannot. False: always decode (and check) the whole image.
        reducing_gap: with ``dct_scaling``, the pixels the decoded crop keeps per output pixel
            on each side (Pillow's ``reducing_gap``), at least 1.0; 2.0 (the default), or 1.0
            for the smallest DCT scale that covers the output (faster, further from the full
            decode).
    """

    dct_scaling: bool = False
    crop_window: bool = True
    reducing_gap: float = 2.0

    def __post_init__(self):
        for name in ("dct_scaling", "crop_window"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Decode: {name} must be True or False, got {getattr(self, name)!r}")
        gap = self.reducing_gap
        if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not 1.0 <= gap < math.inf:
            raise ValueError(
                f"Decode: reducing_gap must be a number of at least 1.0 (decoded pixels kept per "
                f"output pixel under dct_scaling; 2.0 by default), got {gap!r}"
            )
        object.__setattr__(self, "reducing_gap", float(gap))


@dataclass(frozen=True)
class RandomResizedCrop:
    """Crop a random area/aspect box, then resize it to ``size`` (torchvision semantics).

    Attributes:
        size: output size, an int (square) or (height, width).
        scale: range of the crop's area as a fraction of the image's.
        ratio: range of the crop's aspect ratio (width / height), drawn log-uniformly.
    """

    size: Size
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)

    def __post_init__(self):
        object.__setattr__(self, "size", size_hw(_check_size("RandomResizedCrop", self.size)))
        lo, hi = _range("RandomResizedCrop", "scale", self.scale)
        if not 0 < lo <= hi <= 1:
            raise ValueError(f"RandomResizedCrop: scale must satisfy 0 < min <= max <= 1, got {self.scale!r}")
        rlo, rhi = _range("RandomResizedCrop", "ratio", self.ratio)
        if not 0 < rlo <= rhi:
            raise ValueError(f"RandomResizedCrop: ratio must satisfy 0 < min <= max, got {self.ratio!r}")
        object.__setattr__(self, "scale", (lo, hi))
        object.__setattr__(self, "ratio", (rlo, rhi))

    def sample_ops(self, hw: HW, rng: Rng) -> tuple[tuple[Op, ...], HW]:
        """A box drawn as torchvision's ``get_params`` does, then a resize to ``size``."""
        h, w = hw
        x, y, cw, ch = _random_resized_crop(rng(), w, h, self)
        size = size_hw(self.size)  # already a pair (__post_init__): typed as given
        return (O.Crop(x, y, cw, ch), O.Resize(*size)), size

    def op_slots(self) -> tuple[O.Slot, ...]:
        return (O.Slot((O.Crop,)), O.Slot((O.Resize,)))


@dataclass(frozen=True)
class Resize:
    """Resize, antialiased bilinear.

    Args:
        size: an int sets the shorter side (aspect kept); a pair sets (height, width).
    """

    size: Size

    def __post_init__(self):
        object.__setattr__(self, "size", _check_size("Resize", self.size))

    def sample_ops(self, hw: HW, rng: Rng) -> tuple[tuple[Op, ...], HW]:
        h, w = hw
        if isinstance(self.size, tuple):
            nh, nw = self.size
        elif w <= h:
            nw, nh = self.size, int(self.size * h / w)
        else:
            nh, nw = self.size, int(self.size * w / h)
        return (() if (nh, nw) == (h, w) else (O.Resize(nh, nw),)), (nh, nw)

    def op_slots(self) -> tuple[O.Slot, ...]:
        return (O.Slot((O.Resize,), optional=True),)


@dataclass(frozen=True)
class CenterCrop:
    """Crop the centre box (zero padding where the image is smaller).

    Args:
        size: the box, an int (square) or (height, width).
    """

    size: Size

    def __post_init__(self):
        object.__setattr__(self, "size", size_hw(_check_size("CenterCrop", self.size)))

    def sample_ops(self, hw: HW, rng: Rng) -> tuple[tuple[Op, ...], HW]:
        (h, w), (ch, cw) = hw, size_hw(self.size)
        if (ch, cw) == (h, w):
            return (), (ch, cw)
        return (O.Crop(int(round((w - cw) / 2.0)), int(round((h - ch) / 2.0)), cw, ch),), (ch, cw)

    def op_slots(self) -> tuple[O.Slot, ...]:
        return (O.Slot((O.Crop,), optional=True),)


@dataclass(frozen=True)
class HorizontalFlip:
    """Mirror left-right with probability ``p``.

    Args:
        p: the probability of a flip, 0..1.
    """

    p: float = 0.5

    def __post_init__(self):
        if isinstance(self.p, bool) or not isinstance(self.p, (int, float)) or not 0 <= self.p <= 1:
            raise ValueError(f"HorizontalFlip: p must be a probability in [0, 1], got {self.p!r}")
        object.__setattr__(self, "p", float(self.p))

    def sample_ops(self, hw: HW, rng: Rng) -> tuple[tuple[Op, ...], HW]:
        return ((O.Flip(),) if rng().random() < self.p else ()), hw

    def op_slots(self) -> tuple[O.Slot, ...]:
        return (O.Slot((O.Flip,), optional=True),)


@dataclass(frozen=True)
class Normalize:
    """``(x / 255 - mean) / std`` per channel; the output becomes floating point.

    Args:
        mean: per-channel mean in [0, 1] units, as torchvision's Normalize after ToTensor (three
            numbers: a tuple, list, tensor or array); a mean above 1, 0-255 units, warns.
        std: per-channel standard deviation, in the same units.
    """

    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)

    def __post_init__(self):
        for name in ("mean", "std"):
            v = getattr(self, name)
            if hasattr(v, "tolist") and not isinstance(v, (tuple, list)):  # a tensor or an array, as torchvision takes
                v = v.tolist()
            if not (isinstance(v, (tuple, list)) and len(v) == 3 and all(_real(x) for x in v)):
                raise ValueError(
                    f"Normalize: {name} must be three numbers (one per RGB channel: a tuple, list, tensor or "
                    f"array), got {getattr(self, name)!r}"
                )
            object.__setattr__(self, name, tuple(float(x) for x in v))
            if not all(math.isfinite(x) for x in getattr(self, name)):  # NaN passes every comparison
                raise ValueError(
                    f"Normalize: {name} must be finite numbers, got {getattr(self, name)!r}; every image "
                    "would come out NaN or infinite"
                )
        if any(s <= 0 for s in self.std):
            raise ValueError(f"Normalize: std must be positive, got {self.std!r}")
        if any(m > 1 for m in self.mean):  # 0-255 units (DALI's, OpenCV's): every image near one constant
            warnings.warn(
                f"Normalize: mean={self.mean!r} is above 1, but Normalize takes [0, 1] units (torchvision's, "
                f"after ToTensor): images would come out nearly constant. Divide by 255: "
                f"Normalize(mean={_over_255(self.mean)}, std={_over_255(self.std)})",
                UserWarning,
                stacklevel=3,  # the line that built the stage (through the dataclass's __init__)
            )


def _real(x) -> bool:  # a real number (Python's or numpy's), not a bool
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def _over_255(values: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(round(v / 255, 4) for v in values)


@dataclass(frozen=True)
class ToTensor:
    """The output's layout and dtype.

    Args:
        layout: "CHW" (default) or "HWC".
        dtype: "uint8", "float32", "float16", or None (uint8, or float32 after Normalize).
    """

    layout: str = "CHW"
    dtype: str | None = None

    def __post_init__(self):
        if self.layout not in ("CHW", "HWC"):
            raise ValueError(f"ToTensor: layout must be 'CHW' or 'HWC', got {self.layout!r}")
        if self.dtype not in (None, "uint8", "float32", "float16"):
            raise ValueError(f"ToTensor: dtype must be None, 'uint8', 'float32' or 'float16', got {self.dtype!r}")


def _range(stage: str, name: str, v) -> tuple[float, float]:
    if not (isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v)):
        raise ValueError(f"{stage}: {name} must be a (min, max) pair of numbers, got {v!r}")
    return float(v[0]), float(v[1])


Stage = Union[Decode, RandomResizedCrop, Resize, CenterCrop, HorizontalFlip, Normalize, ToTensor]
GEOMETRY = (RandomResizedCrop, Resize, CenterCrop, HorizontalFlip)


def _random_resized_crop(rng: np.random.Generator, w: int, h: int, st: RandomResizedCrop):
    """torchvision's RandomResizedCrop.get_params, drawing from ``rng``. ``lo + (hi - lo) *
    rng.random()`` is numpy's ``uniform(lo, hi)`` to the bit (its C code computes just that) at
    a third of the call's cost."""
    area = w * h
    s_lo, s_span = st.scale[0], st.scale[1] - st.scale[0]
    r_lo = math.log(st.ratio[0])
    r_span = math.log(st.ratio[1]) - r_lo
    for _ in range(10):
        target_area = area * (s_lo + s_span * rng.random())
        aspect = math.exp(r_lo + r_span * rng.random())
        cw = int(round(math.sqrt(target_area * aspect)))
        ch = int(round(math.sqrt(target_area / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            x = int(rng.integers(0, w - cw + 1))
            y = int(rng.integers(0, h - ch + 1))
            return x, y, cw, ch
    in_ratio = w / h
    if in_ratio < st.ratio[0]:
        cw, ch = w, int(round(w / st.ratio[0]))
    elif in_ratio > st.ratio[1]:
        ch, cw = h, int(round(h * st.ratio[1]))
    else:
        cw, ch = w, h
    return (w - cw) // 2, (h - ch) // 2, cw, ch
