"""RandomErasing on a delivered batch: torch ops on the batch's device, the same for every lane.

The lanes ship uint8 images; the batch is normalized where it is delivered, then each
sample's box (drawn from `hybridload.recipe.photometric.erase_generator`, keyed by
(seed, epoch, index) and the output size only) is filled with the stage's value.

Nothing on this path makes the host wait for the device: a fixed value is written with
``fill_`` (a scalar argument of the kernel, no copy), and the noise of ``value="random"``
(drawn on the host, so that every lane gets the same numbers) goes to the device in one
pinned, non-blocking copy for the whole batch, then into each box on the device.
"""

from __future__ import annotations

from typing import Sequence, cast

import numpy as np
import torch

from hybridload.recipe.photometric import RandomErasing, erase_generator


def erase_boxes(
    stage: RandomErasing, out_hw: tuple[int, int], seed: int, epoch: int, indices: Sequence[int] | np.ndarray
) -> list[tuple[tuple[int, int, int, int], np.ndarray | None] | None]:
    """Per sample: None (not erased) or ((top, left, h, w), noise) — noise a float32 (3, h, w)
    standard normal array for ``value="random"``, else None."""
    out: list[tuple[tuple[int, int, int, int], np.ndarray | None] | None] = []
    for i in np.asarray(indices).tolist():
        rng = erase_generator(seed, epoch, i)
        box = stage.draw(out_hw, rng)
        if box is None:
            out.append(None)
            continue
        noise = rng.standard_normal((3, box[2], box[3]), dtype=np.float32) if stage.value == "random" else None
        out.append((box, noise))
    return out


def erase_batch(
    images: torch.Tensor, stage: RandomErasing, layout: str, seed: int, epoch: int, indices: Sequence[int] | np.ndarray
) -> torch.Tensor:
    """Erase, in place, the boxes of a float batch ``[B, 3, H, W]`` (or ``[B, H, W, 3]``)."""
    chw = images.permute(0, 3, 1, 2) if layout == "HWC" else images
    out_hw = (int(chw.shape[-2]), int(chw.shape[-1]))
    boxes = [(k, *item) for k, item in enumerate(erase_boxes(stage, out_hw, seed, epoch, indices)) if item is not None]
    if stage.value == "random":
        if not boxes:
            return images
        noise = _on_device(np.concatenate([n.ravel() for _k, _box, n in boxes if n is not None]), images.device)
        offset = 0
        for k, (top, left, h, w), _n in boxes:
            region = chw[k, :, top : top + h, left : left + w]
            region.copy_(noise[offset : offset + 3 * h * w].view(3, h, w))
            offset += 3 * h * w
        return images
    fill = cast("tuple[float, float, float]", stage.value)  # not "random": __post_init__ made it three numbers
    for k, (top, left, h, w), _n in boxes:
        for c, v in enumerate(fill):
            chw[k, c, top : top + h, left : left + w].fill_(v)
    return images


def _on_device(values: np.ndarray, device: torch.device) -> torch.Tensor:
    """``values`` on ``device``: through pinned memory and a non-blocking copy on CUDA (the host
    does not wait; the caching host allocator keeps the buffer until the copy has run)."""
    host = torch.from_numpy(values)
    if device.type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)
