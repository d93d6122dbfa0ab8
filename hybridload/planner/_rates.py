"""Lane rates measured on a sample of the user's data: the CPU kernels per core on each node,
the GPU lane's images/s and the trainer cores it burns (which the solver takes from the CPU lane)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch

if TYPE_CHECKING:
    from hybridload.lanes._spec import LaneSpec

log = logging.getLogger(__name__)


def _chunks(indices: Sequence[int], size: int):
    idx = list(indices)
    k = 0
    while True:
        yield np.asarray([idx[(k + j) % len(idx)] for j in range(size)], dtype=np.int64)
        k = (k + size) % len(idx)


def cpu_rate_per_core(source, recipe, indices: Sequence[int], seconds: float, batch: int = 8, seed: int = 0) -> float:
    """Images/s of the CPU kernels on one core of this process: the CPU lanes' batch job
    (`hybridload.lanes._cpu_job.process_batch`), called as they call it, so the planner rates
    the work the lanes do (uint8 out; Normalize and RandomErasing are delivery's, every lane's)."""
    from hybridload.lanes._cpu_job import process_batch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = _chunks(indices, batch)
        process_batch(source, recipe, next(gen), seed, 0)  # warm up
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            n += len(process_batch(source, recipe, next(gen), seed, 0).indices)
        return n / (time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)


class _RateProbe:
    """A one-CPU actor that measures the kernels' rate on its node."""

    def __init__(self, source, recipe):
        self.source, self.recipe = source, recipe

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def rate(self, indices, seconds: float) -> float:
        return cpu_rate_per_core(self.source, self.recipe, indices, seconds)


def remote_rates(
    source, recipe, indices: Sequence[int], seconds: float, timeout_s: float = 120.0
) -> list[tuple[str, int, float]]:
    """(node id, CPUs, images/s per core) for every node other than the trainer's, measured by
    one actor on each, all at once. Needs a Ray connection (hybridload.raycluster._connect.acquire)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from hybridload.raycluster import _connect as cluster

    others = [n for n in cluster.nodes() if not n.is_trainer and n.cpus > 0]
    if not others:
        return []
    probe: Any = ray.remote(_RateProbe)  # Ray's types give an actor's methods no `.remote`
    src_ref = ray.put(source)
    actors = [
        probe.options(num_cpus=1, scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False)).remote(
            src_ref, recipe
        )
        for n in others
    ]
    try:
        rates = ray.get([a.rate.remote(list(indices), seconds) for a in actors], timeout=timeout_s + seconds)
    finally:
        for a in actors:
            ray.kill(a, no_restart=True)
    return [(n.node_id, n.cpus, r) for n, r in zip(others, rates)]


def gpu_lane_rate(
    source,
    recipe,
    indices: Sequence[int],
    seconds: float,
    *,
    batch_size: int,
    device: torch.device,
    spec: LaneSpec,
    seed: int = 0,
) -> tuple[float, float, str]:
    """(images/s, trainer-node cores used, label) of the GPU lane run on its own.

    ``spec``: the planned loader's `LaneSpec` (its first GPU engine that builds is measured).
    The cores exclude this thread's waits for the GPU: a CUDA wait may spin a core, which is no
    work the CPU lane loses. Raises LaneUnavailableError when no GPU lane can run here.
    """
    from hybridload.errors import LaneUnavailableError
    from hybridload.lanes._base import BatchTask
    from hybridload.lanes._gpu import build_engine

    lane, errors = None, []
    for name in spec.gpu_engines:
        try:
            lane = build_engine(name, spec, source, recipe, batch_size=batch_size, device=device)
            break
        except (LaneUnavailableError, ValueError) as exc:
            errors.append(f"{name}: {exc}")
    if lane is None:
        raise LaneUnavailableError("; ".join(errors) or spec.gpu_engines_note)
    label = lane.describe()
    if getattr(lane, "cpu_only", False):  # what it means is said once, in the lane's warning
        label = "DALI's CPU-only stand-in"
    sync = _synchronizer(lane.device if hasattr(lane, "device") else torch.device(device))
    try:
        gen = _chunks(indices, batch_size)
        lane.run_batch(BatchTask(0, 0, next(gen), seed=seed))  # warm up
        sync()
        n, seq, waited = 0, 1, 0.0
        cpu0, t0 = time.process_time(), time.perf_counter()
        while True:
            n += len(lane.run_batch(BatchTask(seq, 0, next(gen), seed=seed)).indices)
            seq += 1
            w0 = time.thread_time()
            sync()
            waited += time.thread_time() - w0
            if time.perf_counter() - t0 >= seconds:
                break
        wall = time.perf_counter() - t0
        cores = max(0.0, time.process_time() - cpu0 - waited) / wall
        return n / wall, cores, label
    finally:
        lane.close()


def _synchronizer(device: torch.device):
    """A function that waits for the device's queued work (nothing to wait for on a CPU)."""
    if torch.device(device).type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None
