"""Finishing a batch: the recipe's Normalize (and output dtype), then its RandomErasing, on the
batch's device, the same for every lane.

Lanes ship uint8 images (4x fewer bytes than float32); the loader finishes each batch where it
is delivered, on the device, after the consumer's stream waits on the lane's CUDA event (a GPU
lane asked to normalize finishes its own batches on its stream, with this same step). The
per-op functions are the CPU engine's (`hybridload.kernels.batch.normalize_batch`,
`hybridload.kernels.erase.erase_batch`); the erasing boxes are keyed by (seed, epoch, index)
only, so a batch is finished alike wherever it was made.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from hybridload.kernels.batch import normalize_and_erase
from hybridload.recipe import Recipe


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
    return normalize_and_erase(images, recipe, seed, epoch, indices)
