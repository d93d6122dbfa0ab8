"""Passes that run in this process although the loader runs on actors: an ``IterableDataset`` with
no actor asked for (torch's ``num_workers=0``), and a pass whose actors would wait for CPUs this
process's other pools hold."""

from __future__ import annotations

import warnings
from typing import Any

from hybridload.raycluster import free_cpus


def no_cpu_for_another_pool(pools_here: list) -> bool:
    """Whether a new pass must not start actors: this process holds pools and the cluster has no CPU
    they leave free, so new actors would wait for this very process."""
    free = cpus_left_beside(pools_here)
    return free is not None and free < 1


def cpus_left_beside(pools_here: list) -> int | None:
    """The CPUs free beside this process's pools ``pools_here`` (None: none held, or no Ray),
    counting their starting actors too, since Ray's free count lags them."""
    if not pools_here:
        return None
    free = free_cpus(held=sum(len(p.actors) for p in pools_here))
    return None if free is None else int(free)


def actors_beside(asked: int | None, free: int | None) -> int | None:
    """Actors a new pool starts beside this process's others: the ``asked`` ones where they fit,
    else the free CPUs, so none waits for a CPU this process holds; None: as asked."""
    if free is None or (asked is not None and asked <= free):
        return None
    return max(1, free)


#: why a pass runs in this process although it asked for actors (`in_process_pass`)
OVERSUBSCRIBED = (
    "no free CPU for this pass's Ray actors while another pass of this process holds them (a "
    "training and a validation loader, two live iterators); this pass runs in this process as "
    "torch's num_workers=0 (give the cluster more CPUs, or lower num_workers, to run it on actors)"
)


class SingleProcessView:
    """What torch's single-process iterator reads of ``loader``, with ``num_workers`` and
    ``timeout`` 0; the loader itself is never changed, since another thread or the user's
    ``__iter__`` may read it meanwhile."""

    num_workers = 0
    timeout = 0

    def __init__(self, loader: Any):
        self._loader = loader

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def in_process_pass(loader: Any, why: str | None = None):
    """torch's single-process iterator over ``loader`` (a drop-in DataLoader, read through a
    `SingleProcessView`); with ``why``, one warning saying why a pass that asked for actors runs
    in this process instead."""
    if why is not None:
        warnings.warn(f"hybridload.DataLoader: {why}", stacklevel=3)
    import torch.utils.data as tud

    return tud.dataloader._SingleProcessDataLoaderIter(SingleProcessView(loader))
