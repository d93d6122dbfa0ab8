"""The drop-in's passes that run in this process although the loader runs on Ray actors: an
``IterableDataset`` with no actor asked for (torch's ``num_workers=0``: every worker would
iterate it all), and a pass that would wait for CPUs its own process's other pools hold
(`no_cpu_for_another_pool`)."""

from __future__ import annotations

import warnings
from typing import Any

from hybridload.raycluster import free_cpus


def no_cpu_for_another_pool(pools_here: list) -> bool:
    """Whether a new pass must not start actors: this process already holds actor pools
    (``pools_here``: a training loader beside a validation one, two live iterators) and the
    cluster has no CPU they leave free, i.e. the new actors would wait for CPUs this very
    process holds."""
    free = cpus_left_beside(pools_here)
    return free is not None and free < 1


def cpus_left_beside(pools_here: list) -> int | None:
    """The CPUs the cluster leaves free beside this process's actor pools ``pools_here`` (None:
    it holds none, or Ray is not up: nothing of this process to wait for). Counts the pools'
    actors starting or ready (Ray's free count lags them)."""
    if not pools_here:
        return None
    free = free_cpus(held=sum(len(p.actors) for p in pools_here))
    return None if free is None else int(free)


def actors_beside(asked: int | None, free: int | None) -> int | None:
    """How many actors a new pool starts while this process holds others (``free``: the CPUs
    they leave, `cpus_left_beside`): the ``asked`` ones (None: a fair share of the cluster)
    where they fit, else the free CPUs, so that no actor of it waits for a CPU this process
    holds; its actors then host several worker ids, as on a cluster with fewer CPUs than
    workers. None: as asked (no pool held)."""
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
    ``timeout`` 0 (it refuses any other), every other attribute the loader's own. The loader
    itself is never changed: a pass starting on another thread, or the user's code reading
    ``loader.num_workers`` while the pass starts (an ``IterableDataset``'s ``__iter__``), sees
    what the user gave."""

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
