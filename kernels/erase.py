"""RandomErasing on a delivered batch: torch ops on the batch's device, the same for every lane.

The lanes ship uint8 images; the batch is normalized where it is delivered, then each
sample's box (drawn from :func:`hybridload.recipe.photometric.erase_generator`, keyed by
(seed, epoch, index) and the output size only) is filled with the stage's value.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from hybridload.recipe.photometric import RandomErasing, erase_generator


def erase_boxes(stage: RandomErasing, out_hw: tuple[int, int], seed: int, epoch: int,
                indices: Sequence[int]) -> list[tuple[tuple[int, int, int, int], np.ndarray | None] | None]:
    """Per sample: None (not erased) or ((top, left, h, w), noise) — noise a float32 (3, h, w)
    standard normal array for ``value="random"``, else None."""
    out = []
    for i in np.asarray(indices).tolist():
        rng = erase_generator(seed, epoch, i)
        box = stage.draw(out_hw, rng)
        if box is None:
            out.append(None)
            continue
        noise = rng.standard_normal((3, box[2], box[3]), dtype=np.float32) if stage.value == "random" else None
        out.append((box, noise))
    return out


def erase_batch(images: torch.Tensor, stage: RandomErasing, layout: str, seed: int, epoch: int,
                indices: Sequence[int]) -> torch.Tensor:
    """Erase, in place, the boxes of a float batch ``[B, 3, H, W]`` (or ``[B, H, W, 3]``)."""
    chw = images.permute(0, 3, 1, 2) if layout == "HWC" else images
    boxes = erase_boxes(stage, tuple(chw.shape[-2:]), seed, epoch, indices)
    fill = None
    for k, item in enumerate(boxes):
        if item is None:
            continue
        (top, left, h, w), noise = item
        region = chw[k, :, top:top + h, left:left + w]
        if noise is not None:
            region.copy_(torch.from_numpy(noise))
        else:
            if fill is None:
                fill = torch.tensor(stage.value, dtype=images.dtype).view(3, 1, 1).to(images.device)
            region.copy_(fill.expand_as(region))
    return images
