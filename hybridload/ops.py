"""Concrete per-sample operations: what a recipe's stages become for one image.

A recipe draws each sample's parameters (keyed by seed, epoch, index) and compiles them
into a short list of these ops, applied in order after decoding. Every engine (the CPU
kernels, the DALI builder, the torch GPU engine) has one function per op type; adding a
stage means adding an op here (if it needs a new one) and that function in each engine.
"""

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


Op = Union[Crop, Resize, Flip]

__all__ = ["Crop", "Resize", "Flip", "Op"]
