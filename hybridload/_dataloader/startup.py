"""A drop-in pass's actor pool started from the loader's arguments, read again at each start
(Lightning sets them again on a rebuilt loader)."""

from __future__ import annotations

import pickle
from numbers import Integral
from typing import Any

import torch.utils.data as tud

from hybridload._dataloader.pools import DatasetLane, IterableDatasetActors
from hybridload._dataloader.travel import ship_nameless_classes, travel_error
from hybridload.errors import HybridLoadError
from hybridload.raycluster import PlacementRules
from hybridload.lanes._ray import PoolConfig
from hybridload.sampling import resolve_rank


def placement_rules(loader: Any, rank: int = 0, world_size: int = 1, actors: int | None = None) -> PlacementRules:
    """Where this rank's actors go, from ``loader``'s arguments as they are now (``actors``: so
    many instead of ``num_actors``, the CPUs this process's other pools leave)."""
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
            cpu_actors=loader.num_actors if actors is None else actors,
            rank=rank,
            world_size=world_size,
        )
    except ValueError as exc:
        raise ValueError(f"hybridload.DataLoader: {exc}") from None


def check_multiprocessing_context(context: Any, num_workers: int) -> None:
    """Refuse what torch refuses of ``multiprocessing_context``, with torch's exception classes;
    what it accepts is ignored, since Ray starts the actors."""
    import multiprocessing

    if context is None:
        return
    if not num_workers:
        raise ValueError(
            "hybridload.DataLoader: multiprocessing_context can only be used with multi-process loading "
            f"(num_workers > 0), but got num_workers={num_workers}; drop multiprocessing_context or give num_workers"
        )
    if isinstance(context, str):
        methods = multiprocessing.get_all_start_methods()
        if context not in methods:
            raise ValueError(
                f"hybridload.DataLoader: multiprocessing_context option should specify a valid start method in "
                f"{methods!r}, but got multiprocessing_context={context!r}"
            )
    elif not isinstance(context, multiprocessing.context.BaseContext):
        raise TypeError(
            "hybridload.DataLoader: multiprocessing_context option should be a valid context object or a string "
            "specifying the start method, but got "
            f"multiprocessing_context={context!r}; write one of "
            f"{', '.join(map(repr, multiprocessing.get_all_start_methods()))} or a multiprocessing context"
        )


def start_actors(loader: Any, base_seed: int = 0, actors: int | None = None) -> DatasetLane | IterableDatasetActors:
    """The actor pool of ``loader``'s dataset; ``base_seed`` seeds a map-style dataset's workers
    before ``worker_init_fn``; ``actors``: so many instead of ``num_actors``."""
    rank, world = resolve_rank()
    bundle = (loader.dataset, loader.collate_fn, loader.worker_init_fn)  # one pickle: shared objects stay shared
    ship_nameless_classes(loader.dataset)  # results come back as the user's own classes (namedtuples)
    pool = PoolConfig(
        rules=placement_rules(loader, rank, world, actors),
        ray_address=loader.head_address,
        fallback_embedded=(loader.head_address == "auto"),
        on_no_actors="raise",  # torch's workers have no local lane beside them: no actor is an error
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
    except HybridLoadError:  # worker_init_fn raised, no actor could start: not about pickling
        raise
    except (TypeError, RuntimeError, AttributeError, pickle.PicklingError):
        # Ray's "Could not serialize", or the pickler's own error (a multiprocessing.Value's
        # RuntimeError): name the part that cannot travel
        error = travel_error(bundle)
        if error is None:
            raise
        raise error from None
