"""The device-side batch hook, ``HybridLoader(..., batch_transform=fn)``: its generator keyed by
(seed, epoch, rank, batch position) so a batch gets the same draws after a resume and whichever
lane made it, and its result checked (docs/guide/recipes.md, "Your own transforms").
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from hybridload._keyed import seed_sequence

BatchTransform = Callable[[torch.Tensor, torch.Tensor, torch.Generator], tuple[torch.Tensor, torch.Tensor]]

#: Spawn key of the batch generators: apart from every per-sample stream.
_SPAWN_TAG = 0x6261746368  # "batch"


def check_batch_transform(fn) -> BatchTransform | None:
    """``fn`` if it is None or callable; else a TypeError saying what to pass."""
    if fn is not None and not callable(fn):
        raise TypeError(
            f"HybridLoader: batch_transform must be a function fn(images, labels, generator) -> "
            f"(images, labels), or None; got {fn!r} ({type(fn).__name__})"
        )
    return fn


def batch_seed(seed: int, epoch: int, rank: int, position: int) -> int:
    """The 64-bit seed of the batch at ``position`` of this rank's epoch (a pure function)."""
    ss = seed_sequence(seed, epoch, rank, position, spawn_key=(_SPAWN_TAG,))
    return int(ss.generate_state(1, dtype=np.uint64)[0])


def batch_generator(seed: int, epoch: int, rank: int, position: int, device: torch.device) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with `batch_seed`."""
    gen = torch.Generator(device=device)
    gen.manual_seed(batch_seed(seed, epoch, rank, position))
    return gen


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


class BatchHook:
    """Runs ``fn`` on delivered batches with their keyed generator, checking what it returns."""

    def __init__(self, fn: BatchTransform, *, rank: int):
        self.fn, self.rank = fn, int(rank)

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor, *, seed: int, epoch: int, position: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        gen = batch_generator(seed, epoch, self.rank, position, images.device)
        out = self.fn(images, labels, gen)
        return check_result(
            out, len(images), where=f"batch_transform {_name(self.fn)} (batch {position} of epoch {epoch})"
        )


def check_result(out, batch_size: int, where: str = "batch_transform") -> tuple[torch.Tensor, torch.Tensor]:
    """``out`` as (images, labels) when it is two tensors of ``batch_size`` rows; else an error."""
    fix = "return (images, labels): two tensors whose first dimension is the batch size"
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        got = f"a {type(out).__name__} of {len(out)}" if isinstance(out, (tuple, list)) else type(out).__name__
        raise TypeError(f"{where} returned {got}; {fix}")
    kinds = [type(x).__name__ for x in out]
    if not all(isinstance(x, torch.Tensor) for x in out):
        raise TypeError(f"{where} returned ({', '.join(kinds)}); {fix}")
    images, labels = out
    rows = [tuple(x.shape[:1]) for x in out]
    if rows != [(batch_size,), (batch_size,)]:
        raise ValueError(
            f"{where} returned images of shape {tuple(images.shape)} and labels of shape "
            f"{tuple(labels.shape)} for a batch of {batch_size}; {fix} ({batch_size})"
        )
    return images, labels
