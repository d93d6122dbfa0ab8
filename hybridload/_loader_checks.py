"""Checks of HybridLoader's arguments, pure, each error naming the argument and what to write."""

from __future__ import annotations

import logging
from typing import Any

import torch

from hybridload._policy import LoaderPolicy
from hybridload.recipe import Recipe
from hybridload.sampling import sharding
from hybridload.sampling._pass_state import check_epoch, is_int
from hybridload.sampling._weighted_order import check_num_samples, weight_table
from hybridload.sources import Mix, Source, Weighted

__all__ = [
    "SEED_MIN",
    "SEED_MAX",
    "check_arguments",
    "check_device",
    "check_epoch",
    "check_seed",
    "is_int",
    "weighted_source",
]

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


def check_arguments(
    source: Any,
    recipe: Any,
    batch_size: int,
    policy: Any,
    seed: Any,
    device: Any,
    rank: int | None,
    world_size: int | None,
    drop_last: bool,
) -> tuple[LoaderPolicy, int, int, int]:
    """HybridLoader's arguments checked, in its order: ``(policy, seed, rank, world_size)`` resolved."""
    if not isinstance(source, Source):
        raise TypeError(
            f"HybridLoader: source must be a hybridload.sources source, got {type(source).__name__}; "
            "wrap a torch dataset in sources.TorchDataset(ds)"
        )
    if not isinstance(recipe, Recipe):
        raise TypeError(f"HybridLoader: recipe must be a hybridload.recipe.Recipe, got {type(recipe).__name__}")
    if policy is None:
        policy = LoaderPolicy()
    if not isinstance(policy, LoaderPolicy):
        raise TypeError(f"HybridLoader: policy must be a LoaderPolicy, got {type(policy).__name__}")
    seed = check_seed(seed)
    if device is not None:
        try:
            check_device(torch.device(device))
        except RuntimeError as e:
            raise ValueError(f"HybridLoader: device={device!r} is not a device torch knows: {e}") from None
    rank, world_size = sharding.resolve_rank(rank, world_size)
    sharding.check_batch_size(batch_size, "HybridLoader")
    sharding.num_batches(
        len(source), batch_size=batch_size, world_size=world_size, drop_last=drop_last
    )  # validates batch_size, rank, world_size
    if not 0 <= rank < world_size:
        raise ValueError(f"HybridLoader: rank must be in [0, world_size={world_size}), got {rank}")
    return policy, seed, rank, world_size


def weighted_source(source: Any, sample_weights: Any, num_samples: Any, order: str) -> Any:
    """``source`` drawn by ``sample_weights`` (`sources.Weighted`, its errors naming the loader's
    arguments), or ``source`` itself when no weights are given."""
    if sample_weights is None:
        if num_samples is not None:
            raise ValueError(
                f"HybridLoader: num_samples={num_samples!r} is the draws per epoch of sample_weights; pass "
                "sample_weights too, or leave num_samples unset (an epoch is the source's samples)"
            )
        return source
    if not isinstance(source, Source):
        return source  # check_arguments names it
    if isinstance(source, (Mix, Weighted)):
        raise ValueError(
            f"HybridLoader: sample_weights over a {type(source).__name__} source, which is drawn by weights "
            "already; weight its samples in one place (sources.Weighted over the plain source, or Mix's weights)"
        )
    if order != "keyed":
        raise ValueError(
            f"HybridLoader: sample_weights draws each sample keyed by (seed, epoch, draw); pass order='keyed' "
            f"(got order={order!r})"
        )
    table = weight_table(sample_weights, len(source), "HybridLoader: sample_weights")
    return Weighted(source, table, num_samples=check_num_samples(num_samples, len(source), "HybridLoader"))


def warn_no_batches(rank: int, n: int, batch_size: int, world_size: int, drop_last: bool) -> None:
    """Log that this rank gets no batches (a dataset smaller than the ranks, or all dropped)."""
    logging.getLogger("hybridload._loader").warning(
        "HybridLoader: rank %d gets no batches (%d samples, batch_size %d, world_size %d, drop_last=%s)",
        rank,
        n,
        batch_size,
        world_size,
        drop_last,
    )
