"""RandomErasing on a delivered batch, on its device and the same for every lane; the host never
waits on the device (a fixed value is a ``fill_`` scalar, ``"random"`` noise is drawn on the host
for every lane alike and sent in one pinned non-blocking copy)."""

from __future__ import annotations

from typing import Sequence, cast

import numpy as np
import torch

from hybridload.recipe._photometric import RandomErasing, erase_generator


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
    """``values`` on ``device``, pinned and non-blocking on CUDA (the caching host allocator keeps
    the buffer until the copy has run)."""
    host = torch.from_numpy(values)
    if device.type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)
