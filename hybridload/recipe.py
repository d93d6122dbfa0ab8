"""The preprocessing recipe: an ordered list of stages and its per-sample parameters.

Every random stage draws from one generator keyed by ``(seed, epoch, index)`` only, so
a sample comes out the same whichever lane, worker, thread or rank processes it. The
parameters are computed from the image size alone (known from the file header), which
lets every lane (CPU kernels, DALI) cut the same boxes.

A recipe compiles, per sample, into :class:`SampleParams`: a short list of concrete
geometric operations (integer crops, resizes to a fixed size, horizontal flips) that
every engine applies in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence, Union

import numpy as np

Size = Union[int, tuple[int, int]]


def _check_size(stage: str, size, *, allow_int: bool = True) -> tuple[int, int] | int:
    if isinstance(size, bool):
        raise ValueError(f"{stage}: size must be a positive int or an (height, width) pair, got {size!r}")
    if isinstance(size, (int, np.integer)):
        if not allow_int or size <= 0:
            raise ValueError(f"{stage}: size must be a positive int or an (height, width) pair, got {size!r}")
        return int(size)
    if (isinstance(size, (tuple, list)) and len(size) == 2
            and all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s > 0 for s in size)):
        return (int(size[0]), int(size[1]))
    raise ValueError(f"{stage}: size must be a positive int or an (height, width) pair, got {size!r}")


def _pair(size: int | tuple[int, int]) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else size


# ---------------------------------------------------------------------------- stages

@dataclass(frozen=True)
class Decode:
    """Decode encoded bytes (JPEG, PNG, ...) into an RGB uint8 image. Must come first."""


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
        object.__setattr__(self, "size", _pair(_check_size("RandomResizedCrop", self.size)))
        lo, hi = _range("RandomResizedCrop", "scale", self.scale)
        if not 0 < lo <= hi <= 1:
            raise ValueError(f"RandomResizedCrop: scale must satisfy 0 < min <= max <= 1, got {self.scale!r}")
        rlo, rhi = _range("RandomResizedCrop", "ratio", self.ratio)
        if not 0 < rlo <= rhi:
            raise ValueError(f"RandomResizedCrop: ratio must satisfy 0 < min <= max, got {self.ratio!r}")
        object.__setattr__(self, "scale", (lo, hi))
        object.__setattr__(self, "ratio", (rlo, rhi))


@dataclass(frozen=True)
class Resize:
    """Resize; an int ``size`` sets the shorter side (aspect kept), a pair sets (height, width)."""

    size: Size

    def __post_init__(self):
        object.__setattr__(self, "size", _check_size("Resize", self.size))


@dataclass(frozen=True)
class CenterCrop:
    """Crop the centre ``size`` box (zero padding where the image is smaller)."""

    size: Size

    def __post_init__(self):
        object.__setattr__(self, "size", _pair(_check_size("CenterCrop", self.size)))


@dataclass(frozen=True)
class HorizontalFlip:
    """Mirror left-right with probability ``p``."""

    p: float = 0.5

    def __post_init__(self):
        if isinstance(self.p, bool) or not isinstance(self.p, (int, float)) or not 0 <= self.p <= 1:
            raise ValueError(f"HorizontalFlip: p must be a probability in [0, 1], got {self.p!r}")
        object.__setattr__(self, "p", float(self.p))


@dataclass(frozen=True)
class Normalize:
    """``(x / 255 - mean) / std`` per channel; the output becomes floating point.

    ``mean`` and ``std`` are in [0, 1] units, as torchvision's Normalize after ToTensor.
    """

    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)

    def __post_init__(self):
        for name in ("mean", "std"):
            v = getattr(self, name)
            if not (isinstance(v, (tuple, list)) and len(v) == 3
                    and all(isinstance(x, (int, float)) for x in v)):
                raise ValueError(f"Normalize: {name} must be three numbers (one per RGB channel), got {v!r}")
            object.__setattr__(self, name, tuple(float(x) for x in v))
        if any(s <= 0 for s in self.std):
            raise ValueError(f"Normalize: std must be positive, got {self.std!r}")


@dataclass(frozen=True)
class ToTensor:
    """Output layout and dtype: layout "CHW" (default) or "HWC"; dtype "uint8", "float32",
    "float16", or None (uint8, or float32 after Normalize)."""

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
_GEOMETRY = (RandomResizedCrop, Resize, CenterCrop, HorizontalFlip)


# ---------------------------------------------------------------------- parameters

@dataclass(frozen=True)
class SampleParams:
    """Concrete operations for one sample, applied in order after decoding.

    ``ops`` holds tuples: ``("crop", x, y, w, h)`` (integer box; parts outside the
    image read as zeros), ``("resize", h, w)`` (antialiased bilinear) and ``("flip",)``
    (left-right mirror). ``stages`` names the recipe stage of each op (for errors).
    """

    ops: tuple[tuple, ...]
    stages: tuple[str, ...]
    out_hw: tuple[int, int]


def sample_generator(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator of one sample: keyed by (seed, epoch, index) and nothing else."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence((int(seed) & 0xFFFFFFFFFFFFFFFF,
                                                                       int(epoch), int(index)))))


def _random_resized_crop(rng: np.random.Generator, w: int, h: int, st: RandomResizedCrop):
    """torchvision's RandomResizedCrop.get_params, drawing from ``rng``."""
    area = w * h
    log_ratio = (math.log(st.ratio[0]), math.log(st.ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(st.scale[0], st.scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
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


# --------------------------------------------------------------------------- recipe

@dataclass(frozen=True)
class Recipe:
    """An ordered, validated list of stages.

    Rules: ``Decode`` first (and only once); geometric stages next, in any order; then
    optionally ``Normalize``; then optionally ``ToTensor``. The output must have a fixed
    size so that samples stack into batches.
    """

    stages: tuple[Stage, ...] = field(default_factory=tuple)

    def __post_init__(self):
        stages = tuple(self.stages)
        object.__setattr__(self, "stages", stages)
        if not stages or not isinstance(stages[0], Decode):
            raise ValueError("Recipe: the first stage must be Decode(); add it at the front of the list")
        order = {Decode: 0, **{g: 1 for g in _GEOMETRY}, Normalize: 2, ToTensor: 3}
        last = 0
        for i, st in enumerate(stages):
            kind = type(st)
            if kind not in order:
                raise ValueError(f"Recipe: stage {i} is {st!r}, not a hybridload.recipe stage")
            if i > 0 and kind is Decode:
                raise ValueError("Recipe: Decode may appear only once, as the first stage")
            if order[kind] < last or (order[kind] in (2, 3) and order[kind] == last):
                raise ValueError(
                    f"Recipe: {kind.__name__} at position {i} is out of order; the order is "
                    "Decode, geometric stages, Normalize, ToTensor (each of the last two at most once)")
            last = order[kind]
        if self.out_hw is None:
            raise ValueError("Recipe: the output size is not fixed; end the geometric stages with "
                             "RandomResizedCrop, CenterCrop or Resize((height, width)) so samples stack into batches")

    # -- static facts
    @property
    def out_hw(self) -> tuple[int, int] | None:
        hw = None
        for st in self.stages:
            if isinstance(st, (RandomResizedCrop, CenterCrop)):
                hw = st.size
            elif isinstance(st, Resize):
                hw = st.size if isinstance(st.size, tuple) else None
        return hw

    @property
    def normalize(self) -> Normalize | None:
        return next((s for s in self.stages if isinstance(s, Normalize)), None)

    @property
    def layout(self) -> str:
        tt = next((s for s in self.stages if isinstance(s, ToTensor)), None)
        return tt.layout if tt else "CHW"

    @property
    def dtype(self) -> str:
        tt = next((s for s in self.stages if isinstance(s, ToTensor)), None)
        if tt and tt.dtype:
            return tt.dtype
        return "float32" if self.normalize else "uint8"

    def output_shape(self, batch_size: int) -> tuple[int, ...]:
        h, w = self.out_hw
        return (batch_size, 3, h, w) if self.layout == "CHW" else (batch_size, h, w, 3)

    # -- per-sample parameters
    def sample_params(self, seed: int, epoch: int, index: int, width: int, height: int) -> SampleParams:
        """Concrete operations for sample ``index`` of an image of ``width`` x ``height``."""
        rng = None
        ops: list[tuple] = []
        names: list[str] = []
        w, h = int(width), int(height)
        for st in self.stages:
            name = type(st).__name__
            if isinstance(st, RandomResizedCrop):
                rng = rng or sample_generator(seed, epoch, index)
                x, y, cw, ch = _random_resized_crop(rng, w, h, st)
                ops += [("crop", x, y, cw, ch), ("resize", st.size[0], st.size[1])]
                names += [name, name]
                h, w = st.size
            elif isinstance(st, Resize):
                if isinstance(st.size, tuple):
                    nh, nw = st.size
                elif w <= h:
                    nw, nh = st.size, int(st.size * h / w)
                else:
                    nh, nw = st.size, int(st.size * w / h)
                if (nh, nw) != (h, w):
                    ops.append(("resize", nh, nw))
                    names.append(name)
                h, w = nh, nw
            elif isinstance(st, CenterCrop):
                ch, cw = st.size
                if (ch, cw) != (h, w):
                    y = int(round((h - ch) / 2.0))
                    x = int(round((w - cw) / 2.0))
                    ops.append(("crop", x, y, cw, ch))
                    names.append(name)
                h, w = ch, cw
            elif isinstance(st, HorizontalFlip):
                rng = rng or sample_generator(seed, epoch, index)
                if rng.random() < st.p:
                    ops.append(("flip",))
                    names.append(name)
        return SampleParams(tuple(ops), tuple(names), (h, w))

    def describe(self) -> str:
        return " -> ".join(repr(s) for s in self.stages)


def imagenet_train(size: int = 224, normalize: bool = False) -> Recipe:
    """Decode, RandomResizedCrop(size), HorizontalFlip(0.5)[, Normalize] — uint8 CHW by default."""
    stages: list[Stage] = [Decode(), RandomResizedCrop(size), HorizontalFlip(0.5)]
    if normalize:
        stages.append(Normalize())
    return Recipe(tuple(stages))


def imagenet_eval(size: int = 224, resize: int | None = None, normalize: bool = False) -> Recipe:
    """Decode, Resize(size * 256 / 224), CenterCrop(size)[, Normalize]."""
    stages: list[Stage] = [Decode(), Resize(resize or int(round(size * 256 / 224))), CenterCrop(size)]
    if normalize:
        stages.append(Normalize())
    return Recipe(tuple(stages))


def make(stages: Sequence[Stage]) -> Recipe:
    """Build a Recipe from any sequence of stages."""
    return Recipe(tuple(stages))
