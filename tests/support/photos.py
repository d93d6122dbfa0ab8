"""A photo-like image made from a seed (smooth gradients, discs, grain): JPEG tests encode it at
the subsampling, progression or grey they are about."""

from __future__ import annotations

import numpy as np

from support.jpegs import pixels


def photo_pixels(size: tuple[int, int] = (1203, 901), seed: int = 7) -> np.ndarray:
    """``size`` (width, height) RGB uint8 pixels: gradients, 12 discs and grain."""
    return pixels(*size, seed, discs=12, radius=(30, 200))
