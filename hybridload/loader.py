"""HybridLoader: the user-facing iterator of preprocessed, ordered, per-rank batches."""

from __future__ import annotations

import logging
import time
import warnings
import weakref
from typing import Iterator

import numpy as np
import torch

from . import sharding
from .errors import LaneUnavailableError
from .lanes import InProcessLane
from .merge import OrderedMerger
from .policy import LoaderPolicy
from .recipe import Recipe
from .scheduler import Scheduler
from .sources import Source
from .stats import LoaderStats
from .transfer import DeviceMover, default_device

log = logging.getLogger(__name__)

STATE_VERSION = 1


def _ray_installed() -> bool:
    import importlib.util
    return importlib.util.find_spec("ray") is not None


def _close_lanes(lanes: list) -> None:
    while lanes:
        lane = lanes.pop()
        try:
            lane.close()
        except Exception as exc:  # shutting down: report, keep closing the rest
            log.warning("closing lane %s failed: %s", getattr(lane, "name", lane), exc)


class HybridLoader:
    """Ordered batches of preprocessed images for this rank.

    Args:
        source: a :mod:`hybridload.sources` source.
        recipe: a :class:`hybridload.recipe.Recipe`.
        batch_size: samples per batch (per rank).
        policy: a :class:`LoaderPolicy`; default ``LoaderPolicy()``.
        seed, shuffle, drop_last: as torch's DistributedSampler / DataLoader.
        rank, world_size: default from torch.distributed when initialized, else 0 and 1.
        device: where batches land; default cuda:LOCAL_RANK if CUDA is available, else cpu.
        return_indices: also yield the batch's dataset indices.

    Yields ``(images, labels)`` (or ``(images, labels, indices)``): ``images`` is
    ``[B, 3, H, W]`` uint8 (float after Normalize), ``labels`` and ``indices`` int64.
    """

    def __init__(self, source: Source, recipe: Recipe, batch_size: int, *,
                 policy: LoaderPolicy | None = None, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = False, rank: int | None = None, world_size: int | None = None,
                 device: str | torch.device | None = None, return_indices: bool = False):
        if not isinstance(source, Source):
            raise TypeError(f"HybridLoader: source must be a hybridload.sources source, got {type(source).__name__}; "
                            "wrap a torch dataset in sources.TorchDataset(ds)")
        if not isinstance(recipe, Recipe):
            raise TypeError(f"HybridLoader: recipe must be a hybridload.recipe.Recipe, got {type(recipe).__name__}")
        if policy is None:
            policy = LoaderPolicy()
        if not isinstance(policy, LoaderPolicy):
            raise TypeError(f"HybridLoader: policy must be a LoaderPolicy, got {type(policy).__name__}")
        self.rank, self.world_size = sharding.resolve_rank(rank, world_size)
        sharding.num_batches(len(source), batch_size=batch_size, world_size=self.world_size,
                             drop_last=drop_last)  # validates batch_size, rank, world_size
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"HybridLoader: rank must be in [0, world_size={self.world_size}), got {self.rank}")
        self.source, self.recipe, self.batch_size = source, recipe, int(batch_size)
        self.policy = policy
        self.seed, self.shuffle, self.drop_last = int(seed), bool(shuffle), bool(drop_last)
        self.device = default_device(device)
        self.return_indices = return_indices
        self.epoch = 0
        self._resume: int | None = None
        self._pos = 0
        self._active: _EpochIterator | None = None
        self._stats = LoaderStats()
        self._lanes: list = []
        self._caps: dict[str, float] = {}
        self._fallback: set[str] = set()
        self._plan = _load_plan(policy.plan)
        self._auto: _AutoPlanner | None = None
        self._closed = False
        self._mover = DeviceMover(self.device)
        self._finalizer = weakref.finalize(self, _close_lanes, self._lanes)
        if len(self) == 0:
            log.warning("HybridLoader: rank %d gets no batches (%d samples, batch_size %d, world_size %d, "
                        "drop_last=%s)", self.rank, len(source), batch_size, self.world_size, drop_last)

    # ----------------------------------------------------------------- plan
    def __len__(self) -> int:
        return sharding.num_batches(len(self.source), batch_size=self.batch_size,
                                    world_size=self.world_size, drop_last=self.drop_last)

    def batch_indices(self, epoch: int | None = None) -> list[np.ndarray]:
        """This rank's batches (index arrays) for an epoch, without processing anything."""
        return sharding.rank_batches(len(self.source), batch_size=self.batch_size, seed=self.seed,
                                     epoch=self.epoch if epoch is None else epoch,
                                     world_size=self.world_size, rank=self.rank,
                                     shuffle=self.shuffle, drop_last=self.drop_last)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (the shuffle order), as DistributedSampler.set_epoch."""
        if int(epoch) != self.epoch:
            self._resume = None
            self._pos = 0
        self.epoch = int(epoch)

    # ----------------------------------------------------------------- lanes
    def _ensure_lanes(self) -> list:
        if self._closed:
            raise RuntimeError("HybridLoader is closed")
        if self._lanes:
            return self._lanes
        p = self.policy
        plan = self._plan
        if p.mode == "gpu":
            share = 1.0
        elif p.mode == "split":
            share = p.gpu_share if p.gpu_share is not None else plan.gpu_share
        elif p.mode == "auto":
            share = p.gpu_share if p.gpu_share is not None else (plan.gpu_share if plan else 0.5)
        else:
            share = 0.0
        gpu = self._gpu_lane() if share > 0 or p.mode == "auto" else None
        if gpu is not None and p.mode == "auto":
            self._caps[gpu.name] = share
            self._auto = _AutoPlanner(self, share)
        if gpu is not None:
            self._lanes.append(gpu)
            if p.mode == "split":
                self._caps[gpu.name] = share
        if gpu is not None and p.mode == "gpu":
            # the GPU lane alone; a small in-process lane stands by for failures and rerouted batches
            self._lanes.append(self._inprocess_lane())
            self._fallback.add(self._lanes[-1].name)
        else:
            self._lanes.append(self._cpu_lane())
        return self._lanes

    def _gpu_lane(self):
        from .lanes.gpu import make_gpu_lane
        return make_gpu_lane(self.policy, self.source, self.recipe, seed=self.seed, batch_size=self.batch_size,
                             device=self.device)

    def _inprocess_lane(self):
        p = self.policy
        return InProcessLane(self.source, self.recipe, seed=self.seed, threads=p.resolved_threads(),
                             on_error=p.on_error, pin_memory=self._mover.pin_memory)

    def _cpu_lane(self):
        p = self.policy
        if p.cpu_actors == 0 or (p.cpu_actors is None and not _ray_installed()):
            if p.cpu_actors is None:
                log.warning("Ray is not installed: running the in-process lane (pip install 'hybridload[ray]' "
                            "for Ray CPU actors; set cpu_actors=0 to silence this)")
            return self._inprocess_lane()
        from .lanes.ray_lane import RayLane
        return RayLane(self.source, self.recipe, seed=self.seed, policy=p, rank=self.rank,
                       world_size=self.world_size, pin_memory=self._mover.pin_memory)

    # ----------------------------------------------------------------- iteration
    def __iter__(self) -> Iterator:
        lanes = self._ensure_lanes()
        if self._active is not None:
            self._active._finish(superseded=True)
        start = self._resume if self._resume is not None else 0
        self._resume = None
        self._pos = start
        self._active = _EpochIterator(self, lanes, self.batch_indices(), start)
        return self._active

    def _deliver(self, result):
        labels = torch.from_numpy(result.labels)
        if self.return_indices:
            return self._mover(result.images, labels, torch.from_numpy(result.indices))
        return self._mover(result.images, labels)

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """Where the stream stands: resuming from it yields exactly the batches not yet
        delivered (the per-sample randomness is keyed by (seed, epoch, index), so no
        generator state is needed)."""
        return {"version": STATE_VERSION, "epoch": self.epoch, "position": self._pos,
                "seed": self.seed, "shuffle": self.shuffle, "drop_last": self.drop_last,
                "batch_size": self.batch_size, "world_size": self.world_size, "rank": self.rank,
                "num_samples": len(self.source)}

    def load_state_dict(self, state: dict) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"HybridLoader.load_state_dict: state version {state.get('version')!r} is not "
                             f"{STATE_VERSION}; it was saved by another hybridload version")
        for key in ("seed", "shuffle", "drop_last", "batch_size", "world_size", "rank", "num_samples"):
            mine = len(self.source) if key == "num_samples" else getattr(self, key)
            if state[key] != mine:
                raise ValueError(f"HybridLoader.load_state_dict: saved {key}={state[key]!r} but this loader has "
                                 f"{key}={mine!r}; build the loader with the same arguments to resume")
        if self._active is not None:
            self._active._finish(superseded=True)
        self.epoch = int(state["epoch"])
        self._resume = self._pos = int(state["position"])

    # ----------------------------------------------------------------- reporting / shutdown
    def stats(self) -> dict:
        plan = {"mode": self.policy.mode, "gpu_share": self._caps.get("gpu", 1.0 if self.policy.mode == "gpu" else 0.0),
                "from_plan_file": self._plan is not None}
        if self._auto is not None:
            plan["replans"] = list(self._auto.history)
        d = self._stats.as_dict(plan=plan)
        d.update(epoch=self.epoch, position=self._pos, rank=self.rank, world_size=self.world_size)
        return d

    def close(self) -> None:
        """Stop work in flight and release every lane. Idempotent."""
        if self._active is not None:
            self._active._finish()
            self._active = None
        self._closed = True
        if self._auto is not None:
            self._auto.close()
        self._finalizer()

    def __enter__(self) -> "HybridLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _EpochIterator:
    """One pass over (the rest of) an epoch."""

    def __init__(self, loader: HybridLoader, lanes: list, batches: list, start: int):
        self._loader = loader
        p = loader.policy
        slots = sum(lane.slots for lane in lanes)
        window = p.window or max(2, 2 * slots)
        self._merger = OrderedMerger(start, len(batches), window, p.batch_timeout_s)
        self._scheduler = Scheduler(lanes, batches, start, loader.epoch, self._merger, loader._stats,
                                    caps=loader._caps, fallback=loader._fallback,
                                    straggler_factor=p.straggler_factor, straggler_min_s=p.straggler_min_s)
        self._merger.describe = self._scheduler.where
        self._done = False
        self._superseded = False
        self._scheduler.pump()

    def __iter__(self):
        return self

    def __next__(self):
        loader = self._loader
        if self._superseded:
            raise RuntimeError("this iterator was superseded by a newer iter(loader) or load_state_dict()")
        if self._done:
            raise StopIteration
        t0 = time.perf_counter()
        try:
            result = self._merger.get(poll=self._scheduler.pump)
        except BaseException:
            self._finish()
            raise
        loader._stats.record_wait(time.perf_counter() - t0)
        loader._pos += 1
        if loader._auto is not None:
            loader._auto.after_batch()
        return loader._deliver(result)

    def _finish(self, superseded: bool = False) -> None:
        self._superseded = self._superseded or (superseded and not self._done)
        if not self._done:
            self._done = True
            self._scheduler.stop()
            self._merger.close()

    def __del__(self):
        self._finish()


def _load_plan(plan):
    if plan is None:
        return None
    from .planner.plan import Plan
    return plan if isinstance(plan, Plan) else Plan.load(plan)


class _AutoPlanner:
    """mode="auto": re-plans the GPU lane's share from live lane rates (and NVML where there is a GPU)."""

    def __init__(self, loader: HybridLoader, share: float):
        from .planner.monitor import GpuMonitor
        self.loader = loader
        self.history: list[dict] = []
        self._batches = 0
        self._last = self._snapshot()
        self.monitor = GpuMonitor.start() if loader.device.type == "cuda" else None
        log.info("auto mode: starting at GPU share %.2f (%s)", share,
                 "from the plan" if loader._plan is not None else "in-line start")

    def _snapshot(self) -> dict:
        st = self.loader._stats
        with st._lock:
            return {k: (st.images[k], st.busy_s[k]) for k in set(st.images) | set(st.busy_s)}

    def after_batch(self) -> None:
        from .planner.online import LaneSample, rebalance
        self._batches += 1
        if self._batches % self.loader.policy.replan_every:
            return
        now = self._snapshot()
        lanes = {lane.name: lane for lane in self.loader._lanes}
        samples = {}
        for name, lane in lanes.items():
            img0, busy0 = self._last.get(name, (0, 0.0))
            img1, busy1 = now.get(name, (0, 0.0))
            samples[name] = LaneSample(img1 - img0, busy1 - busy0, getattr(lane, "parallelism", 1))
        self._last = now
        cpu_names = [n for n in lanes if n != "gpu"]
        if "gpu" not in samples or not cpu_names:
            return
        cpu = samples[cpu_names[0]]
        old = self.loader._caps.get("gpu", 0.0)
        util = self.monitor.util if self.monitor is not None else None
        new = rebalance(old, samples["gpu"], cpu, gpu_util=util, max_gpu_util=self.loader.policy.max_gpu_util)
        if abs(new - old) >= 0.01:
            self.loader._caps["gpu"] = new
            entry = {"batch": self.loader._pos, "from": round(old, 3), "to": round(new, 3),
                     "gpu_capacity": round(samples["gpu"].capacity, 1), "cpu_capacity": round(cpu.capacity, 1),
                     "gpu_util": util}
            self.history.append(entry)
            del self.history[:-50]
            log.info("auto mode: GPU share %.2f -> %.2f (GPU lane %.0f images/s, CPU lane %.0f images/s%s)",
                     old, new, samples["gpu"].capacity, cpu.capacity,
                     f", GPU busy {util:.0%}" if util is not None else "")

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()
