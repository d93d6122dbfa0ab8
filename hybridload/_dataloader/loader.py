"""``hybridload.DataLoader``: torch's DataLoader whose workers can be Ray actors, the sampler's
batches going to them as index lists and coming back in order through the ordered merger (what
matches torch and what differs: docs/guide/dropin.md)."""

from __future__ import annotations

import logging
import warnings
import sys
import types
import weakref
from typing import Any, Callable, TypeVar

import torch
import torch.utils.data as tud

from hybridload._dataloader.hosted import HOSTED, HostedPass
from hybridload._dataloader.inprocess import OVERSUBSCRIBED, in_process_pass, no_cpu_for_another_pool
from hybridload._dataloader.inprocess import actors_beside, cpus_left_beside
from hybridload._dataloader.passes import FailedPass, PassSettings, RayPass, iterable_lengths
from hybridload._dataloader.progress import PassProgress
from hybridload._dataloader.seeds import Drawn, draw, draw_seed
from hybridload._dataloader.startup import check_multiprocessing_context, placement_rules, start_actors
from hybridload._dataloader.travel import travel_error
from hybridload._dataloader.worker import InitFailed
from hybridload.errors import close_all, take_all
from hybridload.execution import LoaderStats, recording

log = logging.getLogger(__name__)
T_co = TypeVar("T_co", covariant=True)

_LIVE: weakref.WeakSet = weakref.WeakSet()  # this process's drop-in loaders (their actor pools)


class DataLoader(tud.DataLoader[T_co]):
    """torch.utils.data.DataLoader with Ray actors as workers when ``distribute_mode=True``.

    The arguments up to ``in_order`` are torch's, with torch's meaning; with
    ``distribute_mode=False`` the loader is plain torch.

    Args:
        dataset: a map-style dataset (``__getitem__`` and ``__len__``; ``__getitems__`` when it
            has one).
        batch_size: samples per batch; None: no batching (one sample at a time).
        shuffle: a new random order every epoch.
        sampler: the order of indices (e.g. a ``DistributedSampler``, or a list).
        batch_sampler: yields whole batches of indices (instead of ``batch_size``/``sampler``).
        num_workers: the workers asked for: Ray actors with ``distribute_mode=True``, processes
            otherwise.
        collate_fn: merges a list of samples into a batch (torch's default collate if None).
        pin_memory: copy batches into pinned memory.
        drop_last: drop the last partial batch.
        timeout: seconds to wait for a batch from the workers (0: the default bound, 300 s
            with ``distribute_mode=True``).
        worker_init_fn: called in each worker with its id before it loads data.
        multiprocessing_context: torch's worker start method (worker processes only; checked as
            torch checks it, then ignored on Ray actors).
        generator: the random generator for the sampler and the workers' base seed.
        prefetch_factor: batches loaded ahead per worker.
        persistent_workers: keep the workers alive across epochs.
        pin_memory_device: the device to pin for (torch's argument).
        in_order: yield batches in sampler order (torch's argument).
        distribute_mode: False → plain torch behaviour; True → Ray actors.
        head_address: "auto" joins the cluster named by ``RAY_ADDRESS``, else the one this user
            started on this machine with ``ray start`` (never one another process started with
            ``ray.init()``), else an embedded cluster on 127.0.0.1 (``docs/guide/dropin.md``);
            "host:port": that cluster; None: RAY_ADDRESS, else embedded.
        num_actors: actors for this process; None → ``num_workers`` if > 0, else a fair
            share of the cluster's CPUs (divided among DDP ranks).
        placement: where the actors go: "remote-first", "any" or "local", as in LoaderPolicy.
        reserve_local_cpus: CPUs on this node kept free for training, as in LoaderPolicy.
        window: batches in flight or buffered ahead of the consumer (default 2 per actor).
    """

    def __init__(
        self,
        dataset: tud.Dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: tud.Sampler | Any = None,
        batch_sampler: tud.Sampler | Any = None,
        num_workers: int = 0,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        distribute_mode: bool = False,
        head_address: str | None = "auto",
        num_actors: int | None = None,
        placement: str = "remote-first",
        reserve_local_cpus: int = 0,
        window: int | None = None,
    ):
        if isinstance(batch_size, int) and batch_size > sys.maxsize:  # torch's BatchSampler fails only at iter()
            raise ValueError(
                f"batch_size should be a positive integer value at most sys.maxsize (2**63 - 1), but got "
                f"batch_size={batch_size}; a batch never holds more than the dataset's samples, so write its size"
            )
        if num_workers < 0:  # as torch (which sees num_workers=0 under distribute_mode): its class and words
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
        self.distribute_mode = bool(distribute_mode)
        asked = num_workers
        self.head_address = head_address
        self.num_actors = num_actors if num_actors is not None else (num_workers or None)
        self.placement = placement
        self.reserve_local_cpus = reserve_local_cpus
        self.window = window
        self._prefetch = prefetch_factor or 2
        if self.distribute_mode:
            placement_rules(self)  # a bad placement, reserve_local_cpus or num_actors: refused here
            check_multiprocessing_context(multiprocessing_context, num_workers)  # what torch refuses, refused
            if multiprocessing_context is not None:  # scripts pass it whatever the workers: once a process
                warnings.warn(
                    "hybridload.DataLoader: multiprocessing_context is ignored with distribute_mode=True: "
                    "the workers are Ray actors, which Ray starts, not processes of this loader",
                    UserWarning,
                    stacklevel=1,
                )
            if prefetch_factor is not None and (not isinstance(prefetch_factor, int) or prefetch_factor < 1):
                raise ValueError(f"DataLoader: prefetch_factor must be an int >= 1, got {prefetch_factor!r}")
            if window is None and prefetch_factor is not None:
                self.window = prefetch_factor * max(1, self.num_actors or 1)
            if persistent_workers and not self.num_actors:
                raise ValueError(
                    "DataLoader: persistent_workers=True needs num_workers > 0 (or num_actors), as in "
                    "torch; give num_workers"
                )
        self._persistent_actors = bool(persistent_workers)
        if self.distribute_mode:
            # torch must not start its own worker processes: the actors are the workers
            num_workers, prefetch_factor, persistent_workers, multiprocessing_context = 0, None, False, None
        super().__init__(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            sampler=sampler,
            batch_sampler=batch_sampler,
            num_workers=num_workers,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            drop_last=drop_last,
            timeout=timeout,
            worker_init_fn=worker_init_fn,
            multiprocessing_context=multiprocessing_context,
            generator=generator,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device,
            in_order=in_order,
        )
        if self.distribute_mode:  # what the user asked, as torch reports it (this class runs no processes)
            self.num_workers = asked
            self.check_worker_number_rationality()  # torch's warning, at construction as torch gives it
        self._lanes: list = []  # the actor pools: one (persistent) or one per live pass
        self._streams: list = []  # the live passes' streams, stopped before the lanes close
        self._pass_seeds = (0, 0)  # persistent actors: (base seed drawn by the first pass, passes since)
        self._stats = LoaderStats()
        self._progress = PassProgress(self.batch_sampler)  # the batches delivered of a stateful sampler's pass
        self._finalizer = weakref.finalize(self, _close_all, self._streams, self._lanes)
        _LIVE.add(self)

    def __class_getitem__(cls, item):
        """``Loader[T]`` as torch's ``DataLoader[T]``, also of a subclass that only sets defaults
        (how a code base swaps its loaders), which code annotated for torch's class subscripts."""
        if cls.__dict__.get("__parameters__"):  # generic itself: typing's alias and its checks
            return super().__class_getitem__(item)  # type: ignore[misc]
        return types.GenericAlias(cls, item)

    def __iter__(self):
        if not self.distribute_mode:
            return self._progress.wrap(super().__iter__())
        if self._persistent_actors and self._lanes:
            return self._progress.wrap(self._ray_pass(self._lanes[0], self._draw(first=False), first=False))
        if self.num_workers:  # torch's warning, at every new set of workers as torch gives it
            self.check_worker_number_rationality()
        if isinstance(self.dataset, tud.IterableDataset) and not self.num_actors:  # torch's num_workers=0:
            return self._progress.wrap(in_process_pass(self))  # once, in this process (each worker iterates it all)
        held = [p for ld in list(_LIVE) for p in ld._lanes]
        here = self._in_process_instead(held)  # never wait for our own CPUs
        if here is not None:
            return self._progress.wrap(here)
        actors = actors_beside(self.num_actors, cpus_left_beside(held))  # on the CPUs our pools leave
        drawn = self._draw(first=True)  # before the workers start, as torch's: worker_init_fn sees their seeds
        try:
            lane = start_actors(self, drawn.base_seed, actors)
        except InitFailed as exc:  # worker_init_fn raised: every batch of the pass raises it, as torch's
            return self._progress.wrap(FailedPass(exc.failure, self._index_sampler))
        self._lanes.append(lane)
        try:
            return self._progress.wrap(self._ray_pass(lane, drawn, first=True))
        except BaseException:  # the pass could not start: its actors go now
            self._lanes.remove(lane)
            close_all([lane], "starting a DataLoader pass", log=log)
            raise

    def _in_process_instead(self, held: list):
        """The pass to run here instead of on new actors while this process holds pools ``held``
        (None: start actors): a map-style one when they leave no CPU free, an ``IterableDataset``'s
        whenever pools are held. A dataset that could not travel is refused either way, so the
        answer never depends on a free CPU."""
        iterable = isinstance(self.dataset, tud.IterableDataset)
        if not (held and iterable) and not no_cpu_for_another_pool(held):
            return None
        if iterable:
            iter(self._index_sampler)  # as torch's new iterator, before the seed is drawn
            base_seed = draw_seed(self.generator)
            hosted = HostedPass(self, base_seed, **iterable_lengths(self))
            warnings.warn(f"hybridload.DataLoader: {HOSTED}", stacklevel=3)
            return hosted
        error = travel_error((self.dataset, self.collate_fn, self.worker_init_fn))
        if error is not None:
            raise error
        return in_process_pass(self, why=OVERSUBSCRIBED)

    def _draw(self, first: bool) -> Drawn:
        """A pass's sampler iterator and seeds, drawn from ``generator`` as torch's iterator draws them."""
        drawn = draw(self.dataset, self._index_sampler, self.generator, self._pass_seeds, first)
        self._pass_seeds = drawn.seeds
        return drawn

    def _ray_pass(self, lane, drawn: Drawn, first: bool) -> RayPass:
        """A pass over ``lane`` with what `_draw` drew for it."""
        settings = PassSettings(
            window=self.window,
            timeout=self.timeout,
            prefetch=self._prefetch,
            pin_memory=self.pin_memory,
            pin_memory_device=self.pin_memory_device,
        )
        lengths = iterable_lengths(self) if isinstance(self.dataset, tud.IterableDataset) else {}
        return RayPass(
            lane,
            drawn.batches,
            self._index_sampler,
            settings,
            seeds=self._pass_seeds,
            shared_seed=drawn.shared_seed,
            length=lengths.get("length"),
            reported=lengths.get("reported"),
            hooks=self._stats,
            pools=self._lanes,
            streams=self._streams,
            owns_lane=first and not self._persistent_actors,
            loader=self,
        )

    def state_dict(self) -> dict:
        """torchdata's API: the state as of the last batch delivered (needs a ``DistributedBatchSampler``)."""
        return self._progress.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Resume from ``state``: any rank's ``state_dict()``, at any world size and batch size."""
        self._progress.load_state_dict(state)

    def stats(self) -> dict:
        return self._stats.as_dict()

    def trace(self, path: str) -> Any:
        """``with loader.trace(path):`` its Ray passes' work in the block, as trace-event JSON (docs/guide/tuning.md)."""
        return recording(self._stats, path)

    def close(self) -> None:
        """Stop every pass and kill the actors (a later iteration starts new ones). Idempotent;
        every part is closed even when one fails, and a ShutdownError names each that did."""
        close_all([*take_all(self._streams), *take_all(self._lanes)], "DataLoader.close()")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _close_all(streams: list, lanes: list) -> None:
    """A DataLoader dropped without close(): passes first, then actors; failures are logged."""
    close_all([*take_all(streams), *take_all(lanes)], "closing a DataLoader dropped without close()", log=log)
