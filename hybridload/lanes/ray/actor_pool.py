"""A per-rank, elastic pool of Ray actors placed by policy: the machinery both Ray lanes share.

Subclasses say what an actor is (``worker_cls``, its init args; with ``pass_worker_index`` its
index and the pool size too), how a task is called on it (``call``) and how a raw result becomes
the lane's (``convert``); a `PoolConfig` says where the actors go. The pool picks the least-loaded
ready actor (or the one ``deal`` names while it lives) and kills every actor on ``close()``. It
starts one actor per node at once, the others once the first is ready (`startup`), and works from its first ready actor on:
a slow node never holds the stream. A `Keeper` thread keeps it on the placement rules' target:
lost actors replaced, joining nodes used, drained nodes left once idle. A task lost with its
actor, or with an actor Ray could not reach (drained and replaced), comes back as `WorkerLost`
and is handed on (exactly once is the dispatcher's and merger's job). While the cluster gives
the rank no actor, ``config.on_no_actors`` decides (`capacity`). ``stats()`` counts starts,
losses, live actors over time and node events.
"""

from __future__ import annotations

import logging
from typing import Any

from hybridload.raycluster import connect as cluster
from hybridload.raycluster.placement import elastic_target
from hybridload.errors import WorkerLost
from hybridload.lanes.base import BatchTask, Done, Lane, LaneKind
from hybridload.lanes.ray.callbacks import kill_actor, probe, report_converted, when_done
from hybridload.lanes.ray.capacity import Capacity
from hybridload.lanes.ray.deaths import CRASHES_TO_FAIL, Deaths, actor_died, actor_unavailable, unwrap
from hybridload.lanes.ray.elastic import Keeper, poll_seconds
from hybridload.lanes.ray.held import HeldTasks
from hybridload.lanes.ray.members import Event, Member, Members, State
from hybridload.lanes.ray.pool_config import PoolConfig, start_timeout_seconds
from hybridload.lanes.ray.pool_stats import PoolStats
from hybridload.lanes.ray.spawner import ActorFactory
from hybridload.lanes.ray.startup import first_ready, start_waves

log = logging.getLogger(__name__)


class ActorPool(Lane):
    """Ray actors of ``worker_cls(*init_args)`` placed and run as ``config`` says."""

    name = "ray"
    kind = LaneKind.CPU_ACTORS
    #: each actor also gets its index and the pool's size after the init args
    pass_worker_index = False
    #: a ``cpu_actors`` beyond this rank's CPU slots runs the actors that fit (one warning) instead of failing
    fit_request = False
    crashes_to_fail = CRASHES_TO_FAIL  # crash signals that stop a batch (`deaths`); 1: fail at the first crash

    def __init__(self, worker_cls: type, init_args: tuple, config: PoolConfig):
        if not isinstance(config, PoolConfig):
            raise TypeError(
                f"{type(self).__name__}: config must be a PoolConfig(rules=PlacementRules(...), ...); "
                f"got {type(config).__name__}"
            )
        super().__init__()
        self.config = config
        poll_s = poll_seconds(config.node_poll_s)
        ready_timeout_s = start_timeout_seconds(config.ready_timeout_s)
        self.tasks_per_actor = config.tasks_per_actor
        self._pool_stats = PoolStats()
        # "local": a local stand-in takes the tasks while no actor is ready, the pool holds none
        self._members = Members(self._pool_stats, hold=config.on_no_actors != "local")
        self._held = HeldTasks(self._members)  # given while no actor was ready
        self._keeper: Keeper | None = None
        self._deaths = Deaths(self.name, self.crashes_to_fail)  # the worker processes each batch killed
        self._probing: set[int] = set()  # members asked whether they live, not answered yet
        self._capacity = Capacity(
            on_no_actors=config.on_no_actors,
            actor_wait_s=config.actor_wait_s,
            rules=config.rules,
            members=self._members,
            stats=self._pool_stats,
            name=self.name,
        )
        ray = cluster.acquire(config.ray_address, fallback_embedded=config.fallback_embedded)
        try:
            where, nodes = self._capacity.first_target(cluster.nodes, fit_request=self.fit_request, poll_s=poll_s)
            self._factory = ActorFactory(
                ray, worker_cls, init_args, config.rules.rank, len(where), self.pass_worker_index
            )
            wave, rest = start_waves(where)
            first = [self._spawn(node_id, initial=True, watch=False) for node_id in wave]
            try:
                first_ready(
                    ray,
                    first,
                    self._on_ready,
                    ready_timeout_s,
                    where,
                    go_on=None if self._members.hold else self._capacity.go_on_locally,
                )
            except ray.exceptions.RayTaskError as exc:  # every first actor's start refused (its own error)
                raise unwrap(exc) from None
            first += [self._spawn(node_id, initial=True) for node_id in rest]
            self._pool_stats.live(self._members.count(State.READY), target=len(where))
            self._pool_stats.opened()
            self._keeper = Keeper(
                self._members,
                target=self._target,
                spawn=self._spawn,
                stop=self._kill,
                flush=self._flush,
                poll_s=poll_s,
                ready_timeout_s=ready_timeout_s,
                name=self.name,
                after_step=self._capacity.after_step,
                on_node=self._capacity.on_node,
                known=nodes,
                probe=self._probe,
            )
            self._keeper.start()
        except BaseException:
            self.close()
            raise
        log.info(
            "%s lane: %d actors started on nodes %s, %d ready",
            *(self.name, len(first), sorted(set(self.nodes)), self.parallelism),
        )

    # -- what subclasses define
    def call(self, actor, task: BatchTask):
        """Start ``task`` on ``actor``; return the ObjectRef."""
        raise NotImplementedError

    def convert(self, raw: Any) -> Any:
        return raw

    def deal(self, seq: int) -> int | None:
        """The worker index batch ``seq`` goes to while that actor lives (None: the least loaded)."""
        return None

    def failure(self, task: BatchTask, exc: BaseException) -> Any:
        """What a task that failed in Ray (not with its actor) reports: hybridload's own error unwrapped."""
        return unwrap(exc)

    # -- the pool's actors
    @property
    def actors(self) -> list:
        """Handles of the live actors (starting or ready)."""
        return [m.handle for m in self._members.members(State.READY, State.STARTING)]

    @property
    def nodes(self) -> list[str]:
        """Node id of each live actor (starting or ready)."""
        return [m.node_id for m in self._members.members(State.READY, State.STARTING)]

    def members(self) -> list[Member]:
        """The pool's actors now (ready first): handle, node, state, load. For tests and tools."""
        return self._members.members()

    def stats(self) -> dict:
        """Actors started, replaced, grown, lost, stopped; the live count over time."""
        return self._pool_stats.as_dict()

    def _target(self, nodes, draining) -> list[str]:
        return elastic_target(nodes, draining, self.config.rules)

    def _spawn(self, node_id: str, initial: bool = False, watch: bool = True) -> Member:
        m = self._members.add(self._factory.creator(node_id), node_id, initial=initial)
        if watch:  # (the first wave is watched by first_ready)
            when_done(m.handle.ready.remote(), lambda f: self._on_ready(m, f.exception()))
        return m

    def _on_ready(self, m: Member, exc: BaseException | None) -> None:
        if exc is None:
            if self._members.ready(m) and self._keeper is not None:
                self._keeper.wake()  # held tasks may go out
        elif self._members.dead(m, lost=False, failed_start=True):
            self._kill(m)  # a live actor whose start raised would hold its CPU until its handle is collected
            self._capacity.start_failed(m.key, m.node_id, exc)
            if self._keeper is not None:  # (before the keeper runs, its first step comes at once)
                self._keeper.start_failed(m.node_id)

    def _kill(self, m: Member) -> None:
        kill_actor(m.handle)

    def _probe(self, m: Member) -> None:
        """An idle actor's death is otherwise seen only when its next task fails: ask it."""
        if m.key not in self._probing:
            self._probing.add(m.key)
            probe(m.handle, lambda exc: self._probed(m, exc))

    def _probed(self, m: Member, exc: BaseException | None) -> None:
        self._probing.discard(m.key)  # (an actor that did not answer for a moment is asked again next step)
        if exc is not None and actor_died(exc) and self._lost(m):
            log.warning("Ray actor %d of the %s lane died while idle; a replacement is on its way", m.key, self.name)

    def _lost(self, m: Member) -> bool:
        """``m``'s actor is dead: out of the table (False if it was already, or closed), killed, replaced."""
        if self._closed or not self._members.dead(m, lost=True):
            return False
        self._kill(m)
        if self._keeper is not None:
            self._keeper.wake()
        return True

    # -- the lane interface
    @property  # a live count where the Lane contract has a plain attribute: read the same way
    def slots(self) -> int:  # type: ignore[override]
        return self._members.usable * self.tasks_per_actor

    @property
    def parallelism(self) -> int:  # type: ignore[override]
        return self._members.count(State.READY)

    def unavailable(self) -> str:
        """Why the pool has no ready actor now ("" while it has one): nodes lost, starts failed."""
        return self._capacity.unavailable()

    def describe(self) -> str:
        return f"Ray lane: {self.parallelism} ready actors on {len(set(self.nodes))} node(s)"

    def run_batch(self, task: BatchTask, timeout_s: float = 300.0):
        """Run ``task`` on one actor and wait for its result (for measurements)."""
        import ray

        if (m := self._members.pick(task.seq)) is None:
            raise WorkerLost(f"every Ray actor of the {self.name} lane has died")
        try:
            raw = ray.get(self.call(m.handle, task), timeout=timeout_s)
        except BaseException as exc:
            raise unwrap(exc) from None
        finally:
            self._release(m, task.seq)
        return self.convert(raw)

    def _release(self, m: Member, seq: int) -> None:
        if self._members.release(m, seq) and self._keeper is not None:
            self._keeper.wake()  # a draining actor is idle: stop it

    def _start(self, task: BatchTask, done: Done) -> None:
        m = self._members.pick(task.seq, self.deal(task.seq))
        if m is None:
            if not self._members.usable:
                raise WorkerLost(f"the {self.name} lane has no actor ({self.unavailable()})")
            self._held.hold(task, done)
            if self._keeper is not None:
                self._keeper.wake()
            return
        self._send(m, task, done)

    def _send(self, m: Member, task: BatchTask, done: Done) -> None:
        """Start ``task`` on ``m`` (a lane with work to do first, off this thread, overrides it)."""
        self._watch(m, task, done, lambda: self.call(m.handle, task))

    def _watch(self, m: Member, task: BatchTask, done: Done, call) -> None:
        """Make the call (``call()``: its ObjectRef) and report its result to ``done`` once."""
        try:
            ref = call()
        except BaseException as exc:
            self._release(m, task.seq)
            done(task, exc)
            return

        def _finish(f):
            self._release(m, task.seq)
            try:
                raw = f.result()
            except BaseException as exc:
                done(task, self._failed(m, task, exc))
                return
            report_converted(self.convert, task, raw, done)

        when_done(ref, _finish)

    def _failed(self, m: Member, task: BatchTask, exc: BaseException) -> BaseException:
        """What a call that raised reports: a `WorkerLost` (handed on) when Ray lost its actor or
        could not reach it (a node gone but not yet declared dead answers so for ~10 s: the actor
        takes no more batches and is replaced), else the task's own error."""
        if actor_unavailable(exc):
            self._members.drain(m, Event.UNREACHABLE)
            if self._keeper is not None:
                self._keeper.wake()  # it retires the idle actor and starts its replacement
            return WorkerLost(f"actor {m.index} of the {self.name} lane did not answer for batch {task.seq}: {exc}")
        if not actor_died(exc):
            return self.failure(task, exc)
        if self._lost(m):
            log.warning(
                "Ray actor %d of the %s lane died (%s); batch %d goes to another worker, %d actors remain",
                *(m.key, self.name, type(exc).__name__, task.seq, self.parallelism),
            )
        return self._deaths.lost((task.epoch, task.seq, task.seed), task.seq, m.index, exc)

    def _flush(self) -> None:
        self._held.flush(self._send, closed=lambda: self._closed, why=self.unavailable, name=self.name)

    def _close(self) -> None:
        """Stop the keeper, kill every actor (by handle) and release the Ray connection."""
        try:
            if self._keeper is not None:
                self._keeper.close()
            import ray

            if ray.is_initialized():
                for m in self._members.members():
                    self._members.dead(m, lost=False)
                    self._kill(m)
        finally:
            cluster.release()
