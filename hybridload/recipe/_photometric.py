"""Colour stages (per sample, on uint8) and RandomErasing (at delivery, after Normalize). Each
colour stage emits the same ops for every sample (identity values where nothing changes), so
one fixed DALI graph takes every sample's values."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Union, cast

import numpy as np

from hybridload.recipe import _ops as O
from hybridload._keyed import keyed_generator

HW = tuple[int, int]
Rng = Callable[[], np.random.Generator]
Range = Union[float, tuple[float, float], None]


def _number(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _factor_range(
    stage: str, name: str, v, *, center: float = 1.0, bound: float = math.inf, low: float = 0.0
) -> tuple[float, float] | None:
    """torchvision's ``_check_input``: x → [max(low, center - x), center + x]; (lo, hi) as given.
    None when the range is the identity (nothing to draw)."""
    if v is None:
        return None
    if _number(v):
        if v < 0:
            raise ValueError(f"{stage}: {name} must be a non-negative number or a (min, max) pair, got {v!r}")
        lo, hi = max(low, center - float(v)), center + float(v)
    elif isinstance(v, (tuple, list)) and len(v) == 2 and all(_number(x) for x in v):
        lo, hi = float(v[0]), float(v[1])
    else:
        raise ValueError(f"{stage}: {name} must be a number or a (min, max) pair, got {v!r}")
    if not low <= lo <= hi <= bound:
        raise ValueError(
            f"{stage}: {name} range ({lo}, {hi}) must satisfy {low} <= min <= max <= {bound}; "
            f"write e.g. {name}={(center - low) / 2 if math.isfinite(bound) else 0.4}"
        )
    return None if lo == hi == center else (lo, hi)


def _probability(stage: str, p) -> float:
    if not _number(p) or not 0 <= p <= 1:
        raise ValueError(f"{stage}: p must be a probability in [0, 1], got {p!r}; write e.g. p=0.5")
    return float(p)


def _draw(rng: Rng, r: Range, identity: float) -> float:
    """A factor drawn from ``r`` as ``__post_init__`` left it: None (off) or a (low, high) pair."""
    pair = cast("tuple[float, float] | None", r)
    return identity if pair is None else float(rng().uniform(pair[0], pair[1]))


@dataclass(frozen=True)
class ColorJitter:
    """Random brightness, contrast, saturation and hue, with torchvision's arguments.

    A number ``x`` means the factor range [max(0, 1 - x), 1 + x] (hue: [-x, x], x <= 0.5); a
    pair is the range itself. Applied in that fixed order, not torchvision's random one, so each
    engine's graph stays fixed.

    Args:
        brightness: the brightness factor's spread or range.
        contrast: the contrast factor's spread or range.
        saturation: the saturation factor's spread or range.
        hue: the hue shift's spread or range, in turns (at most 0.5).
    """

    brightness: Range = 0.0
    contrast: Range = 0.0
    saturation: Range = 0.0
    hue: Range = 0.0

    def __post_init__(self):
        for name in ("brightness", "contrast", "saturation"):
            object.__setattr__(self, name, _factor_range("ColorJitter", name, getattr(self, name)))
        object.__setattr__(self, "hue", _factor_range("ColorJitter", "hue", self.hue, center=0.0, bound=0.5, low=-0.5))

    def sample_ops(self, hw: HW, rng: Rng) -> tuple[tuple[O.Op, ...], HW]:
        b = _draw(rng, self.brightness, 1.0)
        c = _draw(rng, self.contrast, 1.0)
        s = _draw(rng, self.saturation, 1.0)
        h = _draw(rng, self.hue, 0.0)
        return (O.Brightness(b), O.Contrast(c), O.Saturation(s), O.Hue(h)), hw

    def op_slots(self) -> tuple[O.Slot, ...]:
        """One slot per factor, in the order drawn; a factor left off is the identity."""
        fields = ("brightness", "contrast", "saturation", "hue")
        types = (O.Brightness, O.Contrast, O.Saturation, O.Hue)
        return tuple(O.Slot((t,), identity=getattr(self, f) is None) for f, t in zip(fields, types))


@dataclass(frozen=True)
class RandomGrayscale:
    """Convert to greyscale (kept as 3 channels) with probability ``p``.

    Args:
        p: the probability, 0..1.
    """

    p: float = 0.1

    def __post_init__(self):
        object.__setattr__(self, "p", _probability("RandomGrayscale", self.p))

    def sample_ops(self, hw: HW, rng: Rng) -> tuple[tuple[O.Op, ...], HW]:
        return (O.Grayscale(bool(rng().random() < self.p)),), hw

    def op_slots(self) -> tuple[O.Slot, ...]:
        return (O.Slot((O.Grayscale,)),)


@dataclass(frozen=True)
class GaussianBlur:
    """Gaussian blur, as torchvision's GaussianBlur.

    Args:
        kernel_size: the kernel's odd side, or (height, width).
        sigma: the blur's standard deviation, drawn uniformly per sample from this range (a
            number fixes it).
    """

    kernel_size: int | tuple[int, int]
    sigma: float | tuple[float, float] = (0.1, 2.0)

    def __post_init__(self):
        k: Any = self.kernel_size  # the user's value, of any type until checked
        if isinstance(k, (tuple, list)) and len(k) == 2 and k[0] == k[1]:
            k = k[0]
        if not (_number(k) and int(k) == k and k > 0 and int(k) % 2 == 1):
            raise ValueError(
                f"GaussianBlur: kernel_size must be one positive odd int, got {self.kernel_size!r}; "
                f"write e.g. kernel_size=23"
            )
        object.__setattr__(self, "kernel_size", int(k))
        s: Any = self.sigma
        pair = (s, s) if _number(s) else s
        if not (
            isinstance(pair, (tuple, list))
            and len(pair) == 2
            and all(_number(x) for x in pair)
            and 0 < pair[0] <= pair[1]
        ):
            raise ValueError(
                f"GaussianBlur: sigma must be a positive number or a (min, max) pair with "
                f"0 < min <= max, got {s!r}; write e.g. sigma=(0.1, 2.0)"
            )
        object.__setattr__(self, "sigma", (float(pair[0]), float(pair[1])))

    def sample_ops(self, hw: HW, rng: Rng) -> tuple[tuple[O.Op, ...], HW]:
        lo, hi = cast("tuple[float, float]", self.sigma)  # as __post_init__ left them
        sigma = lo if lo == hi else float(rng().uniform(lo, hi))
        return (O.Blur(cast(int, self.kernel_size), sigma),), hw

    def op_slots(self) -> tuple[O.Slot, ...]:
        return (O.Slot((O.Blur,)),)


@dataclass(frozen=True)
class RandomErasing:
    """Erase a random box of the normalized image with probability ``p`` (torchvision's
    RandomErasing, after Normalize): area fraction from ``scale``, aspect (h / w) drawn
    log-uniformly from ``ratio``; filled with ``value`` (one number, one per channel, in
    normalized units) or ``"random"`` (standard normal noise).

    Args:
        p: the probability of erasing, 0..1.
        scale: the range of the erased area as a fraction of the image.
        ratio: the range of the box's aspect (height / width).
        value: the fill: a number, one per channel, or "random"."""

    p: float = 0.5
    scale: tuple[float, float] = (0.02, 0.33)
    ratio: tuple[float, float] = (0.3, 3.3)
    value: float | tuple[float, float, float] | str = 0.0

    def __post_init__(self):
        object.__setattr__(self, "p", _probability("RandomErasing", self.p))
        for name, low, high in (("scale", 0.0, 1.0), ("ratio", 0.0, math.inf)):
            v = getattr(self, name)
            if not (
                isinstance(v, (tuple, list))
                and len(v) == 2
                and all(_number(x) for x in v)
                and low <= v[0] <= v[1] <= high
                and (name == "scale" or v[0] > 0)
            ):
                raise ValueError(
                    f"RandomErasing: {name} must be a (min, max) pair with {low} "
                    f"{'<=' if name == 'scale' else '<'} min <= max <= {high}, got {v!r}"
                )
            object.__setattr__(self, name, (float(v[0]), float(v[1])))
        fill: Any = self.value  # the user's value, of any type until checked
        if _number(fill):
            fill = (float(fill),) * 3
        elif isinstance(fill, (tuple, list)) and len(fill) == 3 and all(_number(x) for x in fill):
            fill = tuple(float(x) for x in fill)
        elif fill != "random":
            raise ValueError(
                f"RandomErasing: value must be a number, three numbers (one per channel) or "
                f"'random', got {self.value!r}"
            )
        if fill != "random" and not all(math.isfinite(x) for x in fill):  # NaN passes every comparison
            raise ValueError(
                f"RandomErasing: value must be finite numbers, got {self.value!r}; every erased box would "
                "come out NaN or infinite (write a number in normalized units, e.g. value=0, or 'random')"
            )
        object.__setattr__(self, "value", fill)

    def draw(self, out_hw: HW, rng: np.random.Generator) -> tuple[int, int, int, int] | None:
        """(top, left, h, w) of the box for one sample, or None (torchvision's ``get_params``)."""
        if rng.random() >= self.p:
            return None
        img_h, img_w = out_hw
        area = img_h * img_w
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            erase_area = area * rng.uniform(self.scale[0], self.scale[1])
            aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
            h = int(round(math.sqrt(erase_area * aspect)))
            w = int(round(math.sqrt(erase_area / aspect)))
            if not (h < img_h and w < img_w):
                continue
            top = int(rng.integers(0, img_h - h + 1))
            left = int(rng.integers(0, img_w - w + 1))
            return top, left, h, w
        return None


#: The stream number of the delivery-time generator (the per-sample stages use none).
ERASE_STREAM = 1


def erase_generator(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator of a sample's erasing draws: keyed by (seed, epoch, index) only, and
    independent of the image's size and of every per-sample stage's draws."""
    return keyed_generator(seed, epoch, index, ERASE_STREAM)


PHOTOMETRIC_STAGES = (ColorJitter, RandomGrayscale, GaussianBlur)

__all__ = [
    "ColorJitter",
    "RandomGrayscale",
    "GaussianBlur",
    "RandomErasing",
    "erase_generator",
    "PHOTOMETRIC_STAGES",
    "ERASE_STREAM",
]
