"""Checks of HybridLoader's arguments: pure functions whose errors name the argument and say what
to write. A saved state is checked where it is owned (`hybridload.sampling.pass_state`)."""

from __future__ import annotations

from typing import Any

import torch

from hybridload.sampling.pass_state import check_epoch, is_int

__all__ = ["SEED_MIN", "SEED_MAX", "check_device", "check_epoch", "check_seed", "is_int"]

#: torch.Generator.manual_seed takes ``seed + epoch`` in [-2**63, 2**64); keep seed in int64.
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1


def check_seed(seed: Any) -> int:
    """A seed: an int in [-2**63, 2**63) (torch's generator is seeded with seed + epoch)."""
    if not is_int(seed):
        raise TypeError(f"HybridLoader: seed must be an int, got {seed!r} ({type(seed).__name__})")
    if not SEED_MIN <= seed <= SEED_MAX:
        raise ValueError(
            f"HybridLoader: seed must fit in 64 bits ([-2**63, 2**63)), got {seed}; reduce it, e.g. seed % 2**63"
        )
    return int(seed)


def check_device(device: torch.device) -> None:
    """Refuse a CUDA device when torch sees none, or one beyond the device count."""
    if device.type != "cuda":
        return
    if not torch.cuda.is_available():
        raise ValueError(
            f"HybridLoader: device={str(device)!r} but torch sees no CUDA device here; "
            "pass device='cpu' (or leave device unset to pick one)"
        )
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(
            f"HybridLoader: device={str(device)!r} but only {torch.cuda.device_count()} CUDA "
            "device(s) are visible; pick one of cuda:0.."
        )
