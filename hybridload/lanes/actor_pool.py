"""A per-rank pool of Ray actors placed by policy: the machinery both Ray lanes share.

Subclasses say what an actor is (``worker_cls`` and its init args; with
``pass_worker_index`` each actor also gets its index and the pool size), how a task is
called on it (``call``) and how a raw result becomes the lane's result (``convert``).
The pool picks the least-loaded live actor, turns results into callbacks, marks dead
actors, and kills every actor on ``close()``.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
import warnings
from typing import Any

from hybridload import cluster
from hybridload.errors import WorkerLost
from hybridload.placement import plan_actors

from .base import BatchTask, Done, LaneKind

log = logging.getLogger(__name__)

#: actors are named ``hybridload-<pid>-r<rank>-<tag>-<k>`` (visible in ``ray list actors``)
ACTOR_NAME_PREFIX = "hybridload-"


class ActorPool:
    name = "ray"
    kind = LaneKind.CPU_ACTORS

    def __init__(self, worker_cls: type, init_args: tuple, *, ray_address: str | None, placement: str,
                 reserve_local_cpus: int, cpu_actors: int | None, rank: int = 0, world_size: int = 1,
                 tasks_per_actor: int = 2, ready_timeout_s: float = 120.0, fallback_embedded: bool = False,
                 pass_worker_index: bool = False, fit_request: bool = False):
        self.tasks_per_actor = tasks_per_actor
        self.actors: list = []
        self.nodes: list[str] = []
        self._lock = threading.Lock()
        self._closed = False
        self._released = False
        ray = cluster.acquire(ray_address, fallback_embedded=fallback_embedded)
        try:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
            where = _place(cluster.nodes(), placement=placement, reserve_local_cpus=reserve_local_cpus,
                           cpu_actors=cpu_actors, rank=rank, world_size=world_size, fit_request=fit_request)
            remote_cls = ray.remote(worker_cls)
            init_refs = tuple(ray.put(a) for a in init_args)  # sent once, shared by every actor
            tag = f"{ACTOR_NAME_PREFIX}{os.getpid()}-r{rank}-{uuid.uuid4().hex[:8]}"
            self.actors = [
                remote_cls.options(num_cpus=1, max_concurrency=1, name=f"{tag}-{k}",
                                   scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
                .remote(*init_refs, *((k, len(where)) if pass_worker_index else ()))
                for k, node_id in enumerate(where)
            ]
            try:
                self.nodes = ray.get([a.ready.remote() for a in self.actors], timeout=ready_timeout_s)
            except ray.exceptions.GetTimeoutError:
                raise TimeoutError(f"Ray actors did not start within {ready_timeout_s:g} s on nodes {where}; "
                                   "the cluster may lack free CPUs (check `ray status`)") from None
        except BaseException:
            self.close()
            raise
        self._load = [0] * len(self.actors)
        self._alive = [True] * len(self.actors)
        self._running: dict[int, set[int]] = {}
        log.info("%s lane: %d actors on nodes %s", self.name, len(self.actors), sorted(set(self.nodes)))

    # -- what subclasses define
    def call(self, actor, task: BatchTask):
        """Start ``task`` on ``actor``; return the ObjectRef."""
        raise NotImplementedError

    def convert(self, raw: Any) -> Any:
        return raw

    # -- the lane interface
    @property
    def slots(self) -> int:
        return sum(self._alive) * self.tasks_per_actor

    @property
    def parallelism(self) -> int:
        return sum(self._alive)

    def describe(self) -> str:
        return f"Ray lane: {self.parallelism} actors on {len(set(self.nodes))} node(s)"

    def run_batch(self, task: BatchTask, timeout_s: float = 300.0):
        """Run ``task`` on one actor and wait for its result (for measurements)."""
        import ray
        k = self._pick(task.seq)
        try:
            raw = ray.get(self.call(self.actors[k], task), timeout=timeout_s)
        except BaseException as exc:
            raise _unwrap(exc) from None
        finally:
            self._release(k, task.seq)
        return self.convert(raw)

    def _pick(self, seq: int) -> int:
        """The least-loaded live actor, avoiding actors already running a copy of ``seq``."""
        with self._lock:
            live = [k for k in range(len(self.actors)) if self._alive[k]]
            if not live:
                raise WorkerLost(f"every Ray actor of the {self.name} lane has died")
            busy_with = self._running.get(seq, set())
            k = min(live, key=lambda j: (j in busy_with, self._load[j]))
            self._load[k] += 1
            self._running.setdefault(seq, set()).add(k)
            return k

    def _release(self, k: int, seq: int) -> None:
        with self._lock:
            self._load[k] -= 1
            holders = self._running.get(seq)
            if holders is not None:
                holders.discard(k)
                if not holders:
                    del self._running[seq]

    def submit(self, task: BatchTask, done: Done) -> None:
        if self._closed:
            raise RuntimeError(f"the {self.name} lane is closed")
        k = self._pick(task.seq)
        try:
            fut = self.call(self.actors[k], task).future()
        except BaseException:
            self._release(k, task.seq)
            raise

        def _finish(f):
            self._release(k, task.seq)
            try:
                raw = f.result()
            except BaseException as exc:
                if _actor_died(exc):
                    if not self._closed:
                        with self._lock:
                            self._alive[k] = False
                        log.warning("Ray actor %d of the %s lane died (%s); batch %d goes to another worker, "
                                    "%d actors remain", k, self.name, type(exc).__name__, task.seq, self.parallelism)
                    done(task, WorkerLost(f"actor {k} of the {self.name} lane died while it held batch {task.seq}"))
                    return
                done(task, _unwrap(exc))
                return
            try:
                result = self.convert(raw)
            except BaseException as exc:
                done(task, exc)
                return
            done(task, result)

        fut.add_done_callback(_finish)

    def close(self) -> None:
        """Kill every actor (by handle) and release the Ray connection. Idempotent."""
        if self._closed and self._released:
            return
        self._closed = True
        try:
            import ray
            if ray.is_initialized():
                for a in self.actors:
                    try:
                        ray.kill(a, no_restart=True)
                    except Exception as exc:  # already gone
                        log.debug("ray.kill failed: %s", exc)
        finally:
            if not self._released:
                self._released = True
                cluster.release()


def _place(nodes, *, cpu_actors: int | None, fit_request: bool, **kw) -> list[str]:
    """plan_actors; with ``fit_request`` a ``cpu_actors`` beyond this rank's CPU slots is a
    request: as many actors as fit are placed, with one warning."""
    try:
        return plan_actors(nodes, cpu_actors=cpu_actors, **kw)
    except ValueError:
        if not fit_request or not cpu_actors:
            raise
    for n in range(cpu_actors - 1, 0, -1):
        try:
            where = plan_actors(nodes, cpu_actors=n, **kw)
        except ValueError:
            continue
        warnings.warn(f"{cpu_actors} workers asked for but this rank has {n} free CPU slot(s) in the Ray "
                      f"cluster; running {n} actor(s), each taking batches in turn (as torch's DataLoader "
                      "with more workers than cores, the batches are the same)", stacklevel=4)
        return where
    return plan_actors(nodes, cpu_actors=cpu_actors, **kw)  # not even one fits: its error names why


def _actor_died(exc: BaseException) -> bool:
    import ray
    return isinstance(exc, (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError))


def _unwrap(exc: BaseException) -> BaseException:
    """An error raised inside an actor arrives wrapped in RayTaskError; hand back the original
    when it is one of hybridload's own (a SampleError names the sample)."""
    from hybridload.errors import HybridLoadError
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, HybridLoadError) else exc
