"""Finishing a batch: Normalize (and output dtype), then RandomErasing, on the batch's device and
the same for every lane, so lanes ship uint8 (4x fewer bytes than float32) and a batch is
finished alike wherever it was made (a GPU lane asked to normalize runs this same step on its stream).
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np
import torch

from hybridload._kernels.erase import erase_batch
from hybridload.recipe import Recipe

_TORCH_DTYPES = {"uint8": torch.uint8, "float32": torch.float32, "float16": torch.float16}


@functools.lru_cache(maxsize=32)
def _scale_bias(mean: tuple, std: tuple, layout: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (1, 3, 1, 1) if layout == "CHW" else (1, 1, 1, 3)
    scale = torch.tensor([1.0 / (255.0 * s) for s in std], dtype=torch.float32).view(shape)
    bias = torch.tensor([-m / s for m, s in zip(mean, std)], dtype=torch.float32).view(shape)
    return scale.to(device), bias.to(device)  # once per device: no host-device copy per batch


def normalize_batch(buf: torch.Tensor, recipe: Recipe) -> torch.Tensor:
    """Apply the recipe's Normalize and output dtype to a uint8 batch, on its device."""
    norm = recipe.normalize
    dtype = _TORCH_DTYPES[recipe.dtype]
    if norm is None:
        return buf if dtype == torch.uint8 else buf.to(dtype)
    scale, bias = _scale_bias(tuple(norm.mean), tuple(norm.std), recipe.layout, buf.device)
    out = buf.to(torch.float32).mul_(scale).add_(bias)
    return out if dtype == torch.float32 else out.to(dtype)


def finish_batch(
    images: torch.Tensor, recipe: Recipe, seed: int, epoch: int, indices: Sequence[int] | np.ndarray
) -> torch.Tensor:
    """``images`` normalized (`normalize_batch`), then erased by the recipe's RandomErasing.

    Args:
        images: a lane's uint8 batch in the recipe's layout, on the device it is delivered to.
        recipe: the recipe the batch was made with (its Normalize, output dtype and RandomErasing).
        seed: the pass's seed, as its tasks carried it.
        epoch: the pass's epoch.
        indices: the batch's dataset indices, in order (each sample's erasing box is keyed by its own).
    """
    out = normalize_batch(images, recipe)
    stage = recipe.erasing
    return out if stage is None else erase_batch(out, stage, recipe.layout, seed, epoch, indices)
