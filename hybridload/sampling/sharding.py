"""Which batches a rank sees in an epoch, as a pure function with DistributedSampler +
BatchSampler's semantics (``torch.randperm`` seeded with ``seed + epoch``, padding by repeats,
strided ranks, equal batch counts since unequal ones hang DDP), or a source's own order
(docs/guide/concepts.md, "The ordered per-rank stream")."""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import torch

from hybridload import _environment as environment


#: the largest batch size (Python's slices and torch's BatchSampler take no more); a batch never
#: holds more than the dataset, so any size up to it is one batch of all
BATCH_SIZE_MAX = sys.maxsize


def check_batch_size(batch_size: Any, where: str = "") -> int:
    """``batch_size`` as an int, or ValueError naming ``where`` and what to write: a positive int
    up to `BATCH_SIZE_MAX`."""
    head = f"{where}: " if where else ""
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
        raise ValueError(f"{head}batch_size must be a positive int, got {batch_size!r}")
    if batch_size > BATCH_SIZE_MAX:
        raise ValueError(
            f"{head}batch_size must be at most 2**63 - 1 (sys.maxsize), got {batch_size}; a batch never holds "
            "more than the dataset's samples, so write the dataset's size for one batch of all of them"
        )
    return int(batch_size)


def check_split(n: int, batch_size: int, world_size: int, rank: int) -> None:
    """Refuse a bad dataset size, batch size, world size or rank, naming it."""
    check_batch_size(batch_size)
    if not isinstance(world_size, (int, np.integer)) or world_size <= 0:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not isinstance(rank, (int, np.integer)) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank!r}")
    if n < 0:
        raise ValueError(f"dataset size must be >= 0, got {n}")


#: the most samples order="randperm" takes: its epoch order is made whole at the epoch's start
#: (10^7: 2.8 s, 300 MB; 10^9: no first batch in 600 s), past it order="keyed" works
RANDPERM_MAX_SAMPLES = 50_000_000


def check_order_size(n: int, order: str, where: str) -> None:
    """Refuse, at once, ``order="randperm"`` for a dataset too large for a materialized epoch order."""
    if order == "randperm" and n > RANDPERM_MAX_SAMPLES:
        raise ValueError(
            f"{where}: {n:,} samples are too many for order='randperm' (each epoch starts by making the order of "
            f"every index: ~{16 * n / 2**30:.0f} GB and minutes per rank here; the limit is "
            f"{RANDPERM_MAX_SAMPLES:,}); pass order='keyed' (each batch's indices computed when reached, "
            "O(1) memory), and for TarShards read='shard' (each shard read whole, once per block of shards)"
        )


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """The whole dataset's order for an epoch (before splitting among ranks)."""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    g = torch.Generator()
    g.manual_seed(int(seed) + int(epoch))
    return torch.randperm(n, generator=g).numpy().astype(np.int64, copy=False)


def samples_per_rank(n: int, world_size: int, drop_last: bool) -> int:
    if drop_last and n % world_size != 0:
        return math.ceil((n - world_size) / world_size)
    return math.ceil(n / world_size)


def rank_indices(
    n: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    world_size: int = 1,
    rank: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
) -> np.ndarray:
    """This rank's sample indices for an epoch, in order (DistributedSampler semantics)."""
    check_split(n, 1, world_size, rank)
    order = epoch_order(n, seed, epoch, shuffle)
    total = samples_per_rank(n, world_size, drop_last) * world_size
    return pad_order(order, total)[rank:total:world_size]


def pad_order(order: np.ndarray, total: int) -> np.ndarray:
    """``order`` cut or padded to ``total`` samples as DistributedSampler does: padding
    repeats the order from its start (as often as needed)."""
    n = len(order)
    if total <= n:
        return order[:total]
    if n == 0:
        return np.empty(0, dtype=np.int64)
    reps = math.ceil((total - n) / n)
    return np.concatenate([order] + [order] * reps)[:total]


def num_batches(n: int, *, batch_size: int, world_size: int = 1, drop_last: bool = False) -> int:
    """How many batches every rank gets in an epoch.

    Args:
        n: the dataset's length.
        batch_size: samples per batch on each rank.
        world_size: the number of ranks.
        drop_last: as DistributedSampler's and DataLoader's ``drop_last``.
    """
    check_split(n, batch_size, world_size, 0)
    per_rank = samples_per_rank(n, world_size, drop_last)
    return per_rank // batch_size if drop_last else math.ceil(per_rank / batch_size)


def rank_batches(
    n: int,
    *,
    batch_size: int,
    seed: int = 0,
    epoch: int = 0,
    world_size: int = 1,
    rank: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
    order: Any = None,
) -> list[np.ndarray]:
    """This rank's ordered batches (arrays of dataset indices) for an epoch.

    Args:
        n: the dataset's length.
        batch_size: samples per batch on this rank.
        seed: the order's key.
        epoch: the epoch (non-negative).
        world_size: the number of ranks.
        rank: this rank, ``0 <= rank < world_size``.
        shuffle: False keeps the dataset's order.
        drop_last: drop instead of pad, as DistributedSampler.
        order: a source's ``sample_order()`` (e.g. the shard-aware
            `ShardOrder`), whose ``rank_indices``
            replaces DistributedSampler's; None for DistributedSampler's order."""
    check_split(n, batch_size, world_size, rank)
    if hasattr(order, "rank_batches"):  # a keyed order: each batch computed when asked (sampling.keyed_order)
        return order.rank_batches(
            n,
            batch_size=batch_size,
            seed=seed,
            epoch=epoch,
            world_size=world_size,
            rank=rank,
            shuffle=shuffle,
            drop_last=drop_last,
        )
    pick = rank_indices if order is None else order.rank_indices
    idx = pick(n, seed=seed, epoch=epoch, world_size=world_size, rank=rank, shuffle=shuffle, drop_last=drop_last)
    count = num_batches(n, batch_size=batch_size, world_size=world_size, drop_last=drop_last)
    return [idx[b * batch_size : (b + 1) * batch_size] for b in range(count)]


def resolve_rank(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """(rank, world_size): given values (ints: rank >= 0, world_size >= 1) win, else
    torch.distributed when initialized, else torchrun's RANK / WORLD_SIZE, else (0, 1).

    Args:
        rank: this process's rank, or None to look it up.
        world_size: the number of ranks, or None to look it up.
    """
    for name, v, low in (("rank", rank, 0), ("world_size", world_size, 1)):
        if v is not None and (isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < low):
            raise ValueError(
                f"{name} must be None or an int >= {low}, got {v!r} ({type(v).__name__}); "
                f"pass e.g. {name}={low if name == 'rank' else 2}"
            )
    if rank is not None and world_size is not None:
        return int(rank), int(world_size)
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        r, w = dist.get_rank(), dist.get_world_size()
    elif (launched := environment.rank_and_world_size()) is not None:
        r, w = launched
    else:
        r, w = 0, 1
    return (int(rank) if rank is not None else r), (int(world_size) if world_size is not None else w)
