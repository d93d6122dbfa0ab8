"""A drop-in pass's actor pool started from the loader's arguments: the placement rules they
make (checked at construction; read again at each start, as Lightning sets them again on a
rebuilt loader), the pool's config, and what of a dataset cannot travel to the actors named."""

from __future__ import annotations

from numbers import Integral
from typing import Any

import torch.utils.data as tud

from hybridload.dataloader.pools import DatasetLane, IterableDatasetActors
from hybridload.dataloader.travel import ship_nameless_classes, unpicklable_error
from hybridload.raycluster import PlacementRules
from hybridload.lanes.ray import PoolConfig
from hybridload.sampling import resolve_rank


def placement_rules(loader: Any, rank: int = 0, world_size: int = 1) -> PlacementRules:
    """Where this rank's actors go, from ``loader``'s arguments as they are now."""
    n = loader.num_actors
    if n is not None and (not isinstance(n, Integral) or isinstance(n, bool) or n < 0):
        raise ValueError(
            f"hybridload.DataLoader: num_actors must be a whole number >= 0, or None for num_workers "
            f"(or a fair share of the cluster's CPUs); got {loader.num_actors!r}"
        )
    try:
        return PlacementRules(
            placement=loader.placement,
            reserve_local_cpus=loader.reserve_local_cpus,
            cpu_actors=loader.num_actors,
            rank=rank,
            world_size=world_size,
        )
    except ValueError as exc:
        raise ValueError(f"hybridload.DataLoader: {exc}") from None


def start_actors(loader: Any, base_seed: int = 0) -> DatasetLane | IterableDatasetActors:
    """The actor pool of ``loader``'s dataset (an ``IterableDataset``'s, or a map-style one's);
    ``base_seed``: the pass's, which seeds a map-style dataset's workers before ``worker_init_fn``
    (an ``IterableDataset``'s workers get it when their pass begins)."""
    rank, world = resolve_rank()
    bundle = (loader.dataset, loader.collate_fn, loader.worker_init_fn)  # one pickle: shared objects stay shared
    ship_nameless_classes(loader.dataset)  # results come back as the user's own classes (namedtuples)
    pool = PoolConfig(
        rules=placement_rules(loader, rank, world),
        ray_address=loader.head_address,
        fallback_embedded=(loader.head_address == "auto"),
    )
    try:
        if isinstance(loader.dataset, tud.IterableDataset):
            return IterableDatasetActors(
                bundle,
                pool,
                auto_collation=loader._auto_collation,
                batch_size=loader.batch_size,
                drop_last=loader.drop_last,
                asked=loader.num_workers,
                ranks=(rank, world),
            )
        return DatasetLane(
            bundle, pool, auto_collation=loader._auto_collation, asked=loader.num_workers, base_seed=base_seed
        )
    except TypeError as exc:  # Ray's "Could not serialize": say which part of the dataset, and what to do
        if "serializ" not in str(exc):
            raise
        raise unpicklable_error(bundle, exc) from None
