"""LoaderPolicy: where and how the loader runs its work, frozen and validated; `decode` says what it means."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any

from hybridload.lanes._spec import LaneOptions, LaneSpec
from hybridload.planner._fit import fit_plan
from hybridload.planner._plan import Plan
from hybridload._policy import decode, facts

MODES = ("cpu", "gpu", "split", "auto")
GPU_ENGINES = ("auto", "dali", "torch")
LOCAL_WORKERS = ("auto", "threads", "processes")
START_METHODS = ("auto", "fork", "forkserver", "spawn")


@dataclass(frozen=True, kw_only=True)
class LoaderPolicy:
    """How a HybridLoader splits and runs its work.

    Attributes:
        mode: "cpu" (CPU lanes only), "gpu" (the DALI lane only), "split" (both, the GPU
            lane capped at ``gpu_share``), "auto" (the planner decides, re-planning online).
        gpu_share: fraction of batches the GPU lane may take in "split" mode, 0..1.
        max_gpu_util: the GPU lane may not push GPU utilization above this, 0..1.
        ray_address: where the Ray CPU actors run. None: RAY_ADDRESS if set, else no Ray at all
            (the CPU work runs on this machine, see ``local_workers``); "embedded": a Ray
            cluster on 127.0.0.1 started for this process; "auto": the cluster started with
            ``ray start`` on this machine; "host:port" (or "ray://host:port"): that cluster.
        cpu_actors: Ray CPU actors; None → from the plan or the cluster's CPUs; 0 → the
            in-process lane (threads in this process, no Ray; ``local_workers="processes"``
            still asks for worker processes).
        placement: "remote-first" (actors on nodes other than the trainer's when they have
            CPUs), "any", or "local".
        reserve_local_cpus: CPUs on the trainer's node left free for the training process.
        on_no_actors: what the Ray lane does while the cluster gives this rank no actor (no
            node with a free CPU for it at start, every node lost, a rank beyond the cluster's
            CPUs): "local" runs those batches on this machine's local lane (threads, one
            warning naming what is missing) and moves work back to Ray actors as nodes join;
            "wait" holds them up to ``actor_wait_s`` for a node, then raises; "raise" raises
            at once. Either error is a `hybridload.errors.NoActorsError` or
            `hybridload.errors.NoLaneError` naming why.
        actor_wait_s: with ``on_no_actors="wait"``, how long to wait for a node (seconds).
        ship_bytes: the driver reads each sample's bytes and sends them to the actors (for
            nodes that cannot see the data); by default actors read their own inputs.
        threads: workers of the local lane (threads or processes); None → the CPUs this
            process may use.
        local_workers: what the local lane (the CPU work without Ray) runs on: "threads"
            (in this process), "processes" (worker processes writing batches into shared
            memory), or "auto" (see `hybridload._policy.decode.local_workers`: processes from 2
            usable CPUs where they start by fork, else threads below 8).
        start_method: how worker processes start: "fork" (as torch's DataLoader on Linux: no
            ``if __name__ == "__main__":`` guard needed, nothing pickled), "forkserver" or
            "spawn" (they import your main script: guard the training code), or "auto"
            (fork on Linux, forkserver elsewhere).
        gpu_engine: what runs the GPU lane: "dali" (NVIDIA DALI pipelines), "torch"
            (torchvision's nvJPEG decode + torch ops on the GPU), or "auto" (DALI when it
            imports and builds on a GPU, else the torch engine when torchvision decodes on
            CUDA, else no GPU lane: its batches go to the CPU lanes, with a warning).
        gpu_threads: CPU threads of the GPU lane: DALI's, or the torch engine's host preparation
            (each batch's reads and parameters, in that many parts).
        gpu_memory_budget_mb: upper bound on the GPU lane's output buffers in flight.
        window: batches in flight or buffered ahead of the consumer; None → 2 per worker.
        on_error: "raise" (stop at a bad sample, naming it) or "skip" (a zero image in its
            place, counted in ``stats()``). A read the storage failed (an outage, not bad
            data) raises `StorageError` under either.
        skip_warn_fraction: under ``on_error="skip"``, warn once in a pass when the samples
            skipped in it pass this fraction of the pass's samples, 0..1 (0: at the first skip).
        batch_timeout_s: how long the consumer waits for the next batch before an error
            naming it (never a silent hang).
        plan: a Plan or a path to a plan JSON file (mode "auto" starts from it).
        replan_every: in mode "auto", re-plan the GPU share every this many batches.
        straggler_factor: a batch running this many times longer than its lane's typical
            batch (and at least ``straggler_min_s``) is issued again to another worker;
            the first result wins. None turns re-issuing off.
        straggler_min_s: the shortest deadline for re-issuing.
        max_retries: how many times a batch whose lane failed is handed on before its
            error is raised (a lost Ray actor adds one per lane).
        break_after: a lane failing this many batches in a row gets no more (the other
            lanes carry on).
    """

    mode: str = "cpu"
    gpu_share: float | None = None
    max_gpu_util: float = 0.9
    ray_address: str | None = None
    cpu_actors: int | None = None
    placement: str = "remote-first"
    reserve_local_cpus: int = 1
    on_no_actors: str = "local"
    actor_wait_s: float = 120.0
    ship_bytes: bool = False
    threads: int | None = None
    local_workers: str = "auto"
    start_method: str = "auto"
    gpu_engine: str = "auto"
    gpu_threads: int = 2
    gpu_memory_budget_mb: float | None = None
    window: int | None = None
    on_error: str = "raise"
    skip_warn_fraction: float = 0.01
    batch_timeout_s: float = 300.0
    plan: Any = None
    replan_every: int = 8
    straggler_factor: float | None = 4.0
    straggler_min_s: float = 2.0
    max_retries: int = 3
    break_after: int = 2

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"LoaderPolicy: mode must be one of {', '.join(MODES)}; got {self.mode!r}")
        if self.gpu_share is not None and not _is_fraction(self.gpu_share):
            raise ValueError(f"LoaderPolicy: gpu_share must be a number in [0, 1], got {self.gpu_share!r}")
        if not _is_count(self.replan_every) or self.replan_every == 0:
            raise ValueError(f"LoaderPolicy: replan_every must be an int >= 1, got {self.replan_every!r}")
        if self.plan is not None and not isinstance(self.plan, (str, os.PathLike, Plan)):
            raise ValueError(f"LoaderPolicy: plan must be a Plan or a path to a plan file, got {self.plan!r}")
        if self.mode == "split" and self.gpu_share is None and self.plan is None:
            raise ValueError("LoaderPolicy: mode='split' needs gpu_share=<0..1> or a plan")
        if not _is_fraction(self.max_gpu_util) or self.max_gpu_util == 0:
            raise ValueError(f"LoaderPolicy: max_gpu_util must be in (0, 1], got {self.max_gpu_util!r}")
        if self.threads is not None and (not _is_count(self.threads) or self.threads == 0):
            raise ValueError(f"LoaderPolicy: threads must be None or an int >= 1, got {self.threads!r}")
        if self.local_workers not in LOCAL_WORKERS:
            raise ValueError(
                f"LoaderPolicy: local_workers must be one of {', '.join(LOCAL_WORKERS)}; got {self.local_workers!r}"
            )
        if self.start_method not in START_METHODS:
            raise ValueError(
                f"LoaderPolicy: start_method must be one of {', '.join(START_METHODS)}; got {self.start_method!r}"
            )
        if self.start_method != "auto" and self.start_method not in mp.get_all_start_methods():
            raise ValueError(
                f"LoaderPolicy: start_method={self.start_method!r} is not available on this platform "
                f"(it has {', '.join(mp.get_all_start_methods())}); write start_method='auto'"
            )
        if self.gpu_engine not in GPU_ENGINES:
            raise ValueError(
                f"LoaderPolicy: gpu_engine must be one of {', '.join(GPU_ENGINES)}; got {self.gpu_engine!r}"
            )
        if not _is_fraction(self.skip_warn_fraction):
            raise ValueError(
                f"LoaderPolicy: skip_warn_fraction must be a fraction in [0, 1] of a pass's samples "
                f"(0.01: warn past 1% skipped), got {self.skip_warn_fraction!r}"
            )
        if self.ray_address is not None and not is_ray_address(self.ray_address):
            raise ValueError(
                f"LoaderPolicy: ray_address must be None (no Ray unless RAY_ADDRESS is set), "
                f"'embedded' (a Ray cluster on 127.0.0.1 for this process), 'auto' (the cluster "
                f"started with `ray start` here) or 'host:port'; got {self.ray_address!r}"
            )
        try:  # every knob that passes through is checked once, by the options object that takes it
            decode.knobs(self)
        except ValueError as exc:  # named as the user's field, not the options object's class
            raise ValueError(f"LoaderPolicy: {re.sub(r'^[A-Z][A-Za-z]*: ', '', str(exc))}") from None

    @classmethod
    def from_plan(cls, plan: Any, **overrides) -> "LoaderPolicy":
        """A policy that carries out a plan (a Plan or a plan JSON path); keywords override.

        A plan made on another machine is fitted to this one (`hybridload.planner._fit.fit_plan`):
        a GPU share planned for a GPU this process lacks runs on the CPU lanes, actors beyond what
        the cluster here holds (or with no Ray configured) are clamped, and each change is a warning."""
        p = plan if isinstance(plan, Plan) else Plan.load(plan)
        fit = fit_plan(p, facts.here(overrides))
        for note in fit.notes:
            warnings.warn(f"LoaderPolicy.from_plan: {note}", stacklevel=2)
        return cls(**{**decode.plan_settings(p, fit), **overrides})

    def loaded_plan(self) -> Plan | None:
        """``plan`` as a Plan (read from its file when it is a path), or None."""
        if self.plan is None or isinstance(self.plan, Plan):
            return self.plan
        return Plan.load(self.plan)

    def lane_spec(
        self, plan: Plan | None = None, *, device: Any = "cpu", recipe: Any = None, options: LaneOptions | None = None
    ) -> LaneSpec:
        """The lanes this policy runs here (`hybridload._policy.decode.decode_lanes` with this
        process's facts): how the loader, the bench and the profiler all decode a policy.

        Args:
            plan: default ``loaded_plan()``.
            device: where batches land (it picks the GPU engines).
            recipe: one that is not ``gpu_capable`` turns the GPU lane off.
            options: the lanes' knobs (`hybridload._policy.decode.knobs`), default this policy's for rank 0.
        """
        return decode.decode_lanes(
            self,
            self.loaded_plan() if plan is None else plan,
            ray_installed=facts.ray_installed(),
            dali_installed=facts.dali_installed(),
            ray_address_env=facts.ray_address_env(),
            cpus=facts.usable_cpus(),
            device=device,
            recipe=recipe,
            options=options,
        )


def is_ray_address(v: Any) -> bool:
    """True for "embedded", "auto", "host:port" and "ray://host:port" (port a number 1..65535)."""
    if not isinstance(v, str):
        return False
    if v in ("embedded", "auto"):
        return True
    host, sep, port = v.removeprefix("ray://").rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536 and not any(c.isspace() for c in host))


def _is_fraction(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and 0 <= v <= 1


def _is_positive_finite(v: Any, allow_zero: bool = False) -> bool:
    return (
        not isinstance(v, bool)
        and isinstance(v, (int, float))
        and math.isfinite(v)
        and (v >= 0 if allow_zero else v > 0)
    )


def _is_count(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int) and v >= 0
