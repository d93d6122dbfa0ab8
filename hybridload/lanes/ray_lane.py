"""The Ray lane: a pool of CPU actors running ``kernels/`` on batch tasks.

Only references travel to actors: each actor holds the source (sent once through the
object store) and reads its own inputs where it runs. With ``ship_bytes`` the driver
reads the bytes and sends them along (for nodes that cannot see the data). Results come
back as one uint8 (or float) array per batch through the object store and are copied
once into a (pinned, where CUDA) torch buffer: no per-sample Python objects.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
import time
from typing import Any

import numpy as np
import torch

from hybridload import cluster
from hybridload.placement import plan_actors

from .base import BatchTask, Done

log = logging.getLogger(__name__)

ACTOR_CLASS_NAME = "KernelWorker"
#: every actor of the lane is named ``hybridload-<pid>-r<rank>-<tag>-<k>`` (visible in ``ray list actors``)
ACTOR_NAME_PREFIX = "hybridload-"
_NP_TO_TORCH = {np.uint8: torch.uint8, np.float32: torch.float32, np.float16: torch.float16}


class _Preloaded:
    """A source view whose reads come from bytes the driver shipped."""

    def __init__(self, source, payloads: dict):
        self._source, self._payloads = source, payloads

    def ref(self, index):
        return self._source.ref(index)

    def read(self, ref):
        return self._payloads[ref.index]


class KernelWorker:
    """The actor: processes batch tasks with the CPU kernels, one at a time."""

    def __init__(self, source, recipe, seed: int, on_error: str):
        torch.set_num_threads(1)  # one actor, one CPU
        self.source, self.recipe, self.seed, self.on_error = source, recipe, seed, on_error

    def ready(self) -> str:
        import ray
        return ray.get_runtime_context().get_node_id()

    def run(self, epoch: int, indices: np.ndarray, payloads: dict | None = None):
        from hybridload.kernels import process_batch
        src = self.source if payloads is None else _Preloaded(self.source, payloads)
        res = process_batch(src, self.recipe, indices, self.seed, epoch, on_error=self.on_error, lane="ray")
        return res.images.numpy(), res.labels, res.indices, res.skipped, res.seconds


def _remote_class():
    import ray
    return ray.remote(KernelWorker)


class RayLane:
    """A per-rank pool of :class:`KernelWorker` actors placed by policy."""

    name = "ray"

    def __init__(self, source, recipe, *, seed: int, policy, rank: int = 0, world_size: int = 1,
                 pin_memory: bool = False, tasks_per_actor: int = 2, ready_timeout_s: float = 120.0):
        self.source, self.recipe, self.policy = source, recipe, policy
        self.pin_memory = pin_memory
        self.tasks_per_actor = tasks_per_actor
        self._lock = threading.Lock()
        self._closed = False
        self._released = False
        ray = cluster.acquire(policy.ray_address)
        try:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
            placement = plan_actors(cluster.nodes(), placement=policy.placement,
                                    reserve_local_cpus=policy.reserve_local_cpus, cpu_actors=policy.cpu_actors,
                                    rank=rank, world_size=world_size)
            worker = _remote_class()
            src_ref = ray.put(source)
            tag = f"{ACTOR_NAME_PREFIX}{os.getpid()}-r{rank}-{uuid.uuid4().hex[:8]}"
            self.actors = [
                worker.options(num_cpus=1, max_concurrency=1, name=f"{tag}-{k}",
                               scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
                .remote(src_ref, recipe, seed, policy.on_error)
                for k, node_id in enumerate(placement)
            ]
            try:
                self.nodes = ray.get([a.ready.remote() for a in self.actors], timeout=ready_timeout_s)
            except ray.exceptions.GetTimeoutError:
                raise TimeoutError(f"Ray actors did not start within {ready_timeout_s:g} s on nodes {placement}; "
                                   "the cluster may lack free CPUs (check `ray status`)") from None
        except BaseException:
            self.close()
            raise
        self._load = [0] * len(self.actors)
        self._alive = [True] * len(self.actors)
        log.info("Ray lane: %d actors on nodes %s", len(self.actors), sorted(set(self.nodes)))

    @property
    def slots(self) -> int:
        return sum(self._alive) * self.tasks_per_actor

    def _pick(self) -> int:
        with self._lock:
            live = [k for k in range(len(self.actors)) if self._alive[k]]
            if not live:
                raise RuntimeError("every Ray actor of this lane has died")
            k = min(live, key=lambda j: self._load[j])
            self._load[k] += 1
            return k

    def submit(self, task: BatchTask, done: Done) -> None:
        if self._closed:
            raise RuntimeError("RayLane is closed")
        k = self._pick()
        payloads = None
        if getattr(self.policy, "ship_bytes", False):
            payloads = {}
            for i in task.indices.tolist():
                payloads[i] = self.source.read(self.source.ref(i))
        ref = self.actors[k].run.remote(task.epoch, task.indices, payloads)
        fut = ref.future()

        def _finish(f):
            with self._lock:
                self._load[k] -= 1
            try:
                images, labels, indices, skipped, seconds = f.result()
            except BaseException as exc:
                if self._closed:
                    done(task, exc)
                    return
                if _actor_died(exc):
                    with self._lock:
                        self._alive[k] = False
                    log.warning("Ray actor %d of this lane died (%s); its task goes back to the scheduler",
                                k, type(exc).__name__)
                done(task, _unwrap(exc))
                return
            done(task, self._to_result(images, labels, indices, skipped, seconds))

        fut.add_done_callback(_finish)

    def _to_result(self, images: np.ndarray, labels, indices, skipped, seconds):
        from hybridload.kernels import BatchResult
        buf = torch.empty(images.shape, dtype=_NP_TO_TORCH[images.dtype.type], pin_memory=self.pin_memory)
        np.copyto(buf.numpy(), images)  # one copy out of the object store into a torch buffer
        return BatchResult(buf, np.array(labels), np.array(indices), list(skipped), seconds, self.name)

    def close(self) -> None:
        if self._closed and self._released:
            return
        self._closed = True
        try:
            import ray
            if ray.is_initialized():
                for a in getattr(self, "actors", []):
                    try:
                        ray.kill(a, no_restart=True)
                    except Exception as exc:  # already gone
                        log.debug("ray.kill failed: %s", exc)
        finally:
            if not self._released:
                self._released = True
                cluster.release()


def _actor_died(exc: BaseException) -> bool:
    try:
        import ray
        return isinstance(exc, (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError))
    except Exception:  # pragma: no cover
        return False


def _unwrap(exc: BaseException) -> Any:
    """A SampleError raised in an actor arrives wrapped in RayTaskError; hand back the original."""
    cause = getattr(exc, "cause", None)
    from hybridload.errors import SampleError
    if isinstance(cause, SampleError):
        return cause
    if isinstance(exc, SampleError):
        return exc
    return exc
