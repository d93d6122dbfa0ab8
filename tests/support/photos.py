"""A photo-like image made from a seed (smooth gradients, discs, grain): JPEG tests encode it at
the subsampling, progression or grey they are about."""

from __future__ import annotations

import numpy as np


def photo_pixels(size: tuple[int, int] = (1203, 901), seed: int = 7) -> np.ndarray:
    """``size`` (width, height) RGB uint8 pixels: gradients, 12 discs and grain."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0 : size[1], 0 : size[0]]
    img = np.stack([(x * 255 // size[0]), (y * 255 // size[1]), ((x + y) % 256)], -1).astype(np.float32)
    for _ in range(12):
        cx, cy, r = rng.integers(0, size[0]), rng.integers(0, size[1]), rng.integers(30, 200)
        img[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = rng.integers(0, 256, 3)
    return np.clip(img + rng.normal(0, 4, img.shape), 0, 255).astype(np.uint8)
