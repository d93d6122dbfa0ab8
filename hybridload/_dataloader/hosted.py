"""`HostedPass`: an ``IterableDataset`` pass that asked for workers, run in this process while other
pools of it hold the CPUs, every worker id hosted with its own dataset copy, seeds and worker info
as on an actor, so the stream is still torch's (torch's single-process iterator would read one copy,
not one per worker)."""

from __future__ import annotations

import contextlib
import random
from collections import deque
from typing import Any, Iterator

import numpy as np
import torch

from hybridload._compat import restore_torch_worker_info, torch_pin_memory, torch_worker_info
from hybridload._dataloader.iterable_pass import SizedPass, warn_past_length
from hybridload._dataloader.iterable_worker import End, IterableDatasetWorker
from hybridload._dataloader.travel import unpicklable_error
from hybridload._dataloader.worker import Generated, UserFailure


#: why an IterableDataset pass runs in this process although it asked for actors (`HostedPass`)
HOSTED = (
    "another pass of this process holds Ray actors (a training and a validation loader, two live iterators); "
    "this IterableDataset pass runs each of its workers' iterators in this process, in torch's order (torch's "
    "batches, on one CPU); close() the other loader, or end its pass, to run this one on actors"
)


@contextlib.contextmanager
def this_process_kept() -> Iterator[None]:
    """Run a worker's code here, leaving this process's random generators, worker info and torch
    thread count as they were."""
    state = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None  # torch.manual_seed seeds it
    info, threads = torch_worker_info(), torch.get_num_threads()
    try:
        yield
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])
        torch.set_rng_state(state[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        restore_torch_worker_info(info)
        torch.set_num_threads(threads)  # an actor's worker runs torch on one thread: not this process


class HostedPass(SizedPass):
    """One pass of ``loader``'s ``IterableDataset`` over its ``num_workers`` ids in this process
    (``_workers`` is empty: none runs).

    Args:
        loader: the drop-in loader (held while the pass lives, as torch's iterator holds it).
        base_seed: the workers' base seed, drawn as torch draws it.
        length: the pass's ``len()`` (None: the dataset has none).
        reported: ``len(dataloader)`` as the user read it before the pass (None: never), past which
            each batch gives torch's warning.

    Raises:
        TypeError: the dataset, ``collate_fn`` or ``worker_init_fn`` cannot be copied, naming what.
    """

    _workers: list = []

    def __init__(self, loader: Any, base_seed: int, *, length: int | None, reported: int | None):
        from ray import cloudpickle

        bundle = (loader.dataset, loader.collate_fn, loader.worker_init_fn)
        try:  # the workers' own copies: the user's dataset stays as built, as torch's workers leave it
            copy = cloudpickle.loads(cloudpickle.dumps(bundle))
        except Exception as exc:
            raise unpicklable_error(bundle, exc) from None
        self._loader, self._length, self._reported, self._yielded = loader, length, reported, 0
        self._ids = loader.num_workers or loader.num_actors or 1
        with this_process_kept():
            self._host = IterableDatasetWorker(
                copy, loader._auto_collation, loader.batch_size, loader.drop_last, self._ids
            )
            self._host.begin(base_seed)
        self._turn = deque(self._host.ids())  # ids still yielding, the next to serve first
        self._pin = loader.pin_memory and torch.cuda.is_available()
        self._pin_device = loader.pin_memory_device or None

    def __next__(self) -> Any:
        while self._turn:
            w = self._turn[0]
            with this_process_kept():
                out = self._host.next_batch(w)
            if isinstance(out, End):  # this id's data ended: it leaves the turn
                self._turn.popleft()
                continue
            self._turn.rotate(-1)
            if isinstance(out, UserFailure):  # the user's code raised: this batch's outcome, the pass goes on
                out.reraise()
            if isinstance(out, Generated):
                out = out.generator()
            self._yielded += 1
            warn_past_length(self._loader.dataset, self._reported, self._yielded, self._ids)
            return torch_pin_memory(out, self._pin_device) if self._pin else out
        raise StopIteration
