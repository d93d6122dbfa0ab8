"""Measuring lane rates on a sample of the user's data.

* CPU kernels: images/s per core on the trainer's node (one thread here) and on every
  other node of the Ray cluster (one actor there).
* GPU lane: images/s of the DALI pipeline on the local GPU — or in DALI's CPU-only mode,
  labelled as such — and the trainer-node CPU it burns while doing so (process CPU
  time over wall time), which the solver charges against the local CPU lane.
"""

from __future__ import annotations

import logging
import time
from typing import Sequence

import numpy as np
import torch

log = logging.getLogger(__name__)


def _chunks(indices: Sequence[int], size: int):
    idx = list(indices)
    k = 0
    while True:
        yield np.asarray([idx[(k + j) % len(idx)] for j in range(size)], dtype=np.int64)
        k = (k + size) % len(idx)


def cpu_rate_per_core(source, recipe, indices: Sequence[int], seconds: float, batch: int = 8, seed: int = 0) -> float:
    """Images/s of the CPU kernels on one core of this process."""
    from hybridload.kernels import process_batch
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


def remote_rates(source, recipe, indices: Sequence[int], seconds: float, timeout_s: float = 120.0) -> list[tuple[str, int, float]]:
    """(node id, CPUs, images/s per core) for every node other than the trainer's, measured by
    one actor on each, all at once. Needs a Ray connection (hybridload.cluster.acquire)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from hybridload import cluster
    others = [n for n in cluster.nodes() if not n.is_trainer and n.cpus > 0]
    if not others:
        return []
    probe = ray.remote(_RateProbe)
    src_ref = ray.put(source)
    actors = [probe.options(num_cpus=1, scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False))
              .remote(src_ref, recipe) for n in others]
    try:
        rates = ray.get([a.rate.remote(list(indices), seconds) for a in actors], timeout=timeout_s + seconds)
    finally:
        for a in actors:
            ray.kill(a, no_restart=True)
    return [(n.node_id, n.cpus, r) for n, r in zip(others, rates)]


def gpu_lane_rate(source, recipe, indices: Sequence[int], seconds: float, *, batch_size: int,
                  device: torch.device, threads: int = 2, seed: int = 0) -> tuple[float, float, str]:
    """(images/s, trainer-node cores used, label) of the GPU lane run on its own."""
    from hybridload.lanes.base import BatchTask
    from hybridload.lanes.dali_lane import DaliLane
    lane = DaliLane(source, recipe, seed=seed, batch_size=batch_size, device=device, num_threads=threads)
    label = lane.describe()
    try:
        gen = _chunks(indices, batch_size)
        lane.run_batch(BatchTask(0, 0, next(gen)))  # warm up
        n, seq = 0, 1
        cpu0, t0 = time.process_time(), time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            n += len(lane.run_batch(BatchTask(seq, 0, next(gen))).indices)
            seq += 1
        wall = time.perf_counter() - t0
        cores = (time.process_time() - cpu0) / wall
        return n / wall, cores, label
    finally:
        lane.close()
