"""HybridLoader: the user-facing iterator of preprocessed, ordered, per-rank batches. It holds the
arguments and its batches (a `DistributedBatchSampler`, whose `PassState` owns the position and the
saved state), builds its lanes from a `LaneSpec`, and hands each pass to a `BatchStream`."""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Callable, ContextManager, Iterator, Sequence

import numpy as np
from numpy.typing import ArrayLike
import torch

from hybridload.sampling import sharding
from hybridload.sampling._sampler import DistributedBatchSampler
from hybridload.sampling._keyed_shard_order import check_order, sampler_order
from hybridload.delivery._batch_hook import BatchHook, BatchTransform, check_batch_transform
from hybridload.recipe._custom import check_shippable
from hybridload._loader_checks import check_arguments, check_epoch, warn_no_batches, weighted_source
from hybridload.lanes._base import BatchTask, LaneKind
from hybridload.lanes._build import build_lanes
from hybridload.lanes._spec import LaneSpec
from hybridload._policy import LoaderPolicy
from hybridload._policy.decode import knobs
from hybridload.recipe import Recipe
from hybridload.execution._admission import ShareAdmission
from hybridload.sources import Source
from hybridload.sources._mix import DeliveredCounts
from hybridload.execution._stats import LoaderStats, loader_report
from hybridload.execution._pass_iter import PassIterator, shut_dropped
from hybridload.execution._stream import BatchStream
from hybridload.execution._tasks import LazyTasks
from hybridload.execution._trace import Tracer, recording, span
from hybridload.delivery._finish import finish_batch
from hybridload.delivery._transfer import DeviceMover, default_device
from hybridload.errors import close_all, take_all

log = logging.getLogger(__name__)


class HybridLoader:
    """Ordered batches of preprocessed images for this rank.

    Args:
        source: a `hybridload.sources` source.
        recipe: a `hybridload.recipe.Recipe`.
        batch_size: samples per batch (per rank).
        policy: a `LoaderPolicy`; default ``LoaderPolicy()``.
        seed: the stream's key: the epoch order and every random draw of the recipe are
            functions of (seed, epoch, index), as DistributedSampler's ``seed``.
        shuffle: a new order every epoch (``torch.randperm`` seeded with ``seed + epoch``);
            False keeps the dataset's order.
        order: "randperm" (default: torch.randperm's order, as DistributedSampler; the epoch's
            order is made at its start) or "keyed" (each batch computed when reached, O(1)
            memory: `hybridload.sampling._keyed_order`); another stream, kept in checkpoints;
            "randperm" takes at most 5*10^7 samples.
        drop_last: drop the tail that does not fill every rank equally (DistributedSampler's
            rule) and the last partial batch; False pads by repeating samples instead.
        rank: this process's rank; default from torch.distributed when initialized, else
            torchrun's ``RANK``, else 0.
        world_size: the number of ranks; default as ``rank`` (``WORLD_SIZE``, else 1).
        device: where batches land; default cuda:LOCAL_RANK if CUDA is available, else cpu.
        return_indices: also yield the batch's dataset indices.
        batch_transform: ``fn(images, labels, generator) -> (images, labels)`` run on each
            delivered batch on the device, its generator keyed by (seed, epoch, rank, batch
            position); see `hybridload.delivery._batch_hook`.
        even_batches: True (DistributedSampler's): every rank the same batches, padded with
            repeats; False (Accelerate's name): each sample once across the ranks, batch counts
            may differ: for evaluation (docs/guide/mixtures.md, the DDP evaluation loop).
        sample_weights: per-sample weights (class balance), torch's ``WeightedRandomSampler``
            semantics: ``num_samples`` draws per epoch with replacement, sample ``i`` with
            probability ``w_i / sum(w)``, each draw keyed by (seed, epoch, draw) (needs
            ``order="keyed"``); one weight per sample, or a function of an int64 array of indices
            returning their weights (for 10^9 samples: one float64 held per 1,024 samples). The
            same draws as ``sources.Weighted(source, sample_weights, num_samples=...)``, which
            this builds (docs/guide/mixtures.md).
        num_samples: draws per epoch with ``sample_weights``; default ``len(source)``.

    Yields ``(images, labels)`` (or ``(images, labels, indices)``): ``images`` is
    ``[B, 3, H, W]`` uint8 (float after Normalize), ``labels`` and ``indices`` int64.
    """

    def __init__(
        self,
        source: Source,
        recipe: Recipe,
        batch_size: int,
        *,
        policy: LoaderPolicy | None = None,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        device: str | torch.device | None = None,
        return_indices: bool = False,
        batch_transform: BatchTransform | None = None,
        order: str = "randperm",
        even_batches: bool = True,
        sample_weights: ArrayLike | Callable[[np.ndarray], ArrayLike] | None = None,
        num_samples: int | None = None,
    ):
        source = weighted_source(source, sample_weights, num_samples, order)
        policy, seed, rank, world_size = check_arguments(
            source, recipe, batch_size, policy, seed, device, rank, world_size, drop_last
        )
        self.source, self.recipe, self.batch_size, self.policy = source, recipe, int(batch_size), policy
        self.order, source_order = check_order(order, "HybridLoader"), source.sample_order()
        sharding.check_order_size(len(source), order, "HybridLoader")
        self._sampler = DistributedBatchSampler(
            len(source),
            self.batch_size,
            seed=seed,
            shuffle=bool(shuffle),
            drop_last=bool(drop_last),
            rank=rank,
            world_size=world_size,
            order=sampler_order(source_order, order, "HybridLoader"),
            fingerprint=source.fingerprint,
            even_batches=even_batches,
        )
        self._pass = self._sampler.pass_state  # where the pass is, and the saved state: one owner
        self.device, self.return_indices = default_device(device), return_indices
        fn = check_batch_transform(batch_transform)
        self._hook = BatchHook(fn, rank=rank) if fn is not None else None
        self._active: weakref.ref | None = None  # the pass holds the loader, not back: no cycle for the GC
        #: the policy's knobs, each in the options object of the code that reads it
        self._knobs = knobs(policy, rank=rank, world_size=world_size)
        self._stats = LoaderStats(self._knobs.skip_warn_fraction)
        self._per_source = DeliveredCounts.of(source)  # a Mix: samples delivered per source
        self._lanes, self._fallback = [], []  # type: list, list
        self._admission: ShareAdmission | None = None  # the GPU lane's share: built once, with the lanes
        self._plan = policy.loaded_plan()
        self._closed = False
        self._passes = threading.RLock()  # starting, superseding and counting a pass: one thread at a time
        self._mover = DeviceMover(self.device)
        self._streams: list = []  # the current pass's stream: closed before the lanes, even by GC
        self._finalizer = weakref.finalize(self, shut_dropped, self._streams, self._lanes, log)
        #: the lanes this loader runs, decoded from the policy once (``LoaderPolicy.lane_spec``)
        self.lane_spec: LaneSpec = policy.lane_spec(
            self._plan, device=self.device, recipe=recipe, options=self._knobs.lanes
        )
        if not recipe.gpu_capable:  # a user's function must reach the workers: say so now, naming it
            check_shippable(recipe.stages, self.lane_spec.ships_recipe)
        if len(self) == 0:
            warn_no_batches(rank, len(source), batch_size, world_size, drop_last)

    # ----------------------------------------------------------------- the sampler's state
    seed = property(lambda self: self._sampler.seed)
    shuffle = property(lambda self: self._sampler.shuffle)
    drop_last = property(lambda self: self._sampler.drop_last)
    rank = property(lambda self: self._sampler.rank)
    """This process's rank, from `rank=` or torch.distributed (`RANK`, else 0)."""
    world_size = property(lambda self: self._sampler.world_size)
    """The number of ranks the dataset is split among (`world_size=`, torch.distributed, `WORLD_SIZE`, else 1)."""
    epoch = property(lambda self: self._pass.epoch)
    """The epoch the next pass runs (`set_epoch`), or the one a resumed checkpoint is in."""

    def __len__(self) -> int:
        return self._sampler.epoch_batches()  # a whole epoch's, also while a resumed epoch runs

    def batch_indices(self, epoch: int | None = None) -> Sequence[np.ndarray]:
        """This rank's batches (index arrays) for an epoch, without processing anything (with
        ``order="keyed"`` a sequence computing each batch when indexed)."""
        return self._sampler.batches(self.epoch if epoch is None else epoch)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (the shuffle order), as DistributedSampler.set_epoch.

        Unlike torch's sampler, a negative epoch is refused (the per-sample randomness is
        keyed by (seed, epoch, index) with non-negative keys)."""
        self._sampler.set_epoch(check_epoch(epoch, where="HybridLoader.set_epoch"))

    # ----------------------------------------------------------------- lanes
    def _ensure_lanes(self) -> list:
        if self._closed:
            raise RuntimeError("HybridLoader is closed")
        if self._lanes:
            return self._lanes
        spec = self.lane_spec
        built = build_lanes(
            spec,
            self.source,
            self.recipe,
            batch_size=self.batch_size,
            device=self.device,
            pin_memory=self._mover.pin_memory,
        )
        self._lanes.extend(built.lanes)
        self._fallback = built.fallback
        gpu, steer = any(lane.kind is LaneKind.GPU for lane in self._lanes), None
        if gpu and spec.auto:
            from hybridload.planner._online import OnlinePlanner

            log.info(
                "auto mode: starting at GPU share %.2f (%s)",
                spec.start_share,
                "from the plan" if self._plan is not None else "in-line start",
            )
            steer = OnlinePlanner.start(self._lanes, self._knobs.replan_every, self._knobs.max_gpu_util, self.device)
        self._admission = ShareAdmission(
            {LaneKind.GPU: spec.gpu_share} if gpu and spec.gpu_share is not None else {}, steer=steer
        )  # from here on written by the passes' dispatchers only
        return self._lanes

    def describe_lanes(self, used_only: bool = False) -> str:
        """What runs the work, in words (each lane's ``describe()``); ``used_only``: only lanes that took batches."""
        used = {k for k, v in self._stats.as_dict()["lanes"].items() if v["batches"]} if used_only else None
        return "; ".join(lane.describe() for lane in self._lanes if used is None or lane.name in used)

    # ----------------------------------------------------------------- iteration
    def __iter__(self) -> Iterator:
        with self._passes:  # from two threads at once: the lanes built once, the newer pass supersedes the older
            return self._begin_pass()

    def _begin_pass(self) -> PassIterator:
        lanes = self._ensure_lanes()
        p = self._sampler.begin_pass(f"iter(loader) on thread {threading.current_thread().name!r}")
        epoch, seed = p.epoch, self.seed  # the pass's own, on its tasks
        self._finish_pass()  # the older pass, superseded by p
        tasks = LazyTasks(p.batches, lambda k, b: BatchTask(k, epoch, b, size=len(b), seed=seed))
        stats = self._stats.begin_pass(len(p) * self.batch_size)  # skips: per pass
        stream = BatchStream(
            lanes,
            tasks,
            self._knobs.passes,
            start=p.start,
            hooks=stats,
            admission=self._admission,
            fallback=self._fallback,
        )
        self._streams[:] = [stream]
        active = PassIterator(self._deliver, stream, p, seed)
        self._active = weakref.ref(active)
        return active

    def _finish_pass(self) -> None:
        active = self._active() if self._active is not None else None
        if active is not None:
            active.finish()
        while self._streams:  # the pass's iterator may be gone already: its stream is closed all the same
            self._streams.pop().close()
        self._active = None

    def _deliver(self, result, p: PassIterator):
        with self._passes:  # a pass superseded while this batch was on its way delivers nothing
            p.check()
            position = p.pass_.position  # this batch's place in the epoch (keys the batch hook)
            p.pass_.deliver()
            if self._per_source is not None:
                self._per_source.add(result.indices)
        # every lane ships uint8 (4x fewer bytes than float32); Normalize (and RandomErasing) run here, on the device,
        # after the consumer's stream waits on the lane's CUDA event (if any); keyed by the pass's seed and epoch
        with span("hybridload.to_device", trace := self._stats.trace):  # in torch's profiler and the trace
            images, labels, *rest = self._mover.deliver(result, with_indices=self.return_indices)
            images = finish_batch(images, self.recipe, p.seed, p.epoch, result.indices)
        if self._hook is not None:
            with span("hybridload.batch_transform", trace):
                images, labels = self._hook(images, labels, seed=p.seed, epoch=p.epoch, position=position)
        return (images, labels, *rest)

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """Where the stream stands (the same on every rank of a DDP job in step): any rank, at any
        world size and batch size, resumes from it; see docs/guide/guarantees.md ("Resuming")."""
        return self._pass.get_state()

    def load_state_dict(self, state: dict) -> None:
        """Resume from a ``state_dict()`` of any rank, saved at any world size and batch size: the
        samples of the epoch not yet delivered follow, split among this loader's ranks; another
        dataset, seed or order is refused (`ResumeMismatchError`)."""
        with self._passes:
            self._sampler.load_state_dict(state, "HybridLoader.load_state_dict")  # checked whole before it changes
            self._finish_pass()

    # ----------------------------------------------------------------- reporting / shutdown
    def stats(self) -> dict:
        """What the loader counted since it started or `reset_stats()`, a plain dict (keys: the API page)."""
        d = loader_report(
            self._stats, self._lanes, self._fallback, self._admission, self.lane_spec.mode, self._plan is not None
        )
        d.update(epoch=self.epoch, position=self._pass.position, rank=self.rank, world_size=self.world_size)
        if self._per_source is not None:
            d["sources"] = self._per_source.as_dict()
        return d

    def trace(self, path: str | os.PathLike) -> ContextManager[Tracer]:
        """``with loader.trace(path):`` the loader's work in the block, as trace-event JSON (docs/guide/tuning.md)."""
        return recording(self._stats, path)

    def reset_stats(self) -> None:
        """Start the counters of ``stats()`` afresh (e.g. after a warm-up)."""
        self._stats.reset()
        if self._per_source is not None:
            self._per_source.reset()

    def close(self) -> None:
        """Stop work in flight and release every lane. Idempotent. Every part is closed even
        when one fails to; a `ShutdownError` then names each that did."""
        with self._passes:  # a pass another thread is starting (its lanes too) starts first, then closes
            self._closed = True
            self._finalizer.detach()
            current = ("the current pass", self._finish_pass)
            steer = self._admission.steer if self._admission is not None else None
            close_all([current, steer, *take_all(self._lanes)], "HybridLoader.close()")

    def __enter__(self) -> "HybridLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
