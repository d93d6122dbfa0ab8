"""A per-rank elastic pool of Ray actors placed by policy, shared by both Ray lanes. One keeper
thread owns the member table (`elastic`); the other threads post to it and touch only the loads,
through ``pick`` and ``release`` (docs/decisions/pool-keeper-owns-the-table.md). A task lost with
its actor comes back as `WorkerLost` and is handed on."""

from __future__ import annotations

import logging
import time
from typing import Any

from hybridload.raycluster import _connect as cluster
from hybridload.errors import WorkerLost
from hybridload.lanes._base import BatchTask, Done, Lane, LaneKind
from hybridload.lanes._ray.callbacks import kill_actor, probe, report_converted, when_done
from hybridload.lanes._ray.capacity import Capacity
from hybridload.lanes._ray.deaths import CRASHES_TO_FAIL, Deaths, actor_died, actor_unavailable, unwrap
from hybridload.lanes._ray.elastic import Keeper, Post, poll_seconds
from hybridload.lanes._ray.members import Event, Member, Members, State
from hybridload.lanes._ray.pool_config import PoolConfig, start_timeout_seconds
from hybridload.lanes._ray.pool_stats import PoolStats
from hybridload.lanes._ray.spawner import ActorFactory
from hybridload.lanes._ray.startup import first_ready, start_waves

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
        self._keeper: Keeper | None = None
        self._deaths = Deaths(self.name, self.crashes_to_fail)  # the worker processes each batch killed
        self._probing: set[int] = set()  # members asked whether they live, not answered yet (the keeper's)
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
            self._keeper = Keeper(
                self._members,
                self,
                self._capacity,
                poll_s=poll_s,
                ready_timeout_s=ready_timeout_s,
                name=self.name,
                known=nodes,
            )
            wave, rest = start_waves(where)
            first = [self._spawn(node_id, initial=True, watch=False) for node_id in wave]
            try:
                first_ready(
                    ray,
                    first,
                    self._on_first_ready,
                    ready_timeout_s,
                    where,
                    go_on=None if self._members.hold else self._capacity.go_on_locally,
                )
            except ray.exceptions.RayTaskError as exc:  # every first actor's start refused (its own error)
                raise unwrap(exc) from None
            first += [self._spawn(node_id, initial=True) for node_id in rest]
            self._keeper.apply_posted()
            self._pool_stats.live(self._members.count(State.READY), target=len(where))
            self._pool_stats.opened()
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

    # -- the keeper's hands (`Actors`), called on its thread
    def start_actor(self, node_id: str) -> Member:
        return self._spawn(node_id)

    def stop_actor(self, m: Member) -> None:
        kill_actor(m.handle)

    def probe_actor(self, m: Member) -> None:
        """An idle actor's death is otherwise seen only when its next task fails: ask it."""
        if m.key in self._probing:
            return
        self._probing.add(m.key)

        def answered(exc: BaseException | None) -> None:  # on Ray's callback thread
            died = exc is not None and actor_died(exc)
            self._post(Post(m, Event.LOST if died else None, then=lambda moved: self._probed(m, moved), step=False))

        probe(m.handle, answered)

    def send_held(self, m: Member, task: BatchTask, done: Done) -> None:
        self._send(m, task, done)

    def _probed(self, m: Member, died: bool) -> None:
        self._probing.discard(m.key)  # (an actor that did not answer for a moment is asked again next step)
        if died:
            log.warning("Ray actor %d of the %s lane died while idle; a replacement is on its way", m.key, self.name)

    # -- what the pool's threads post
    def _post(self, p: Post) -> None:
        if self._keeper is not None:
            self._keeper.post(p)
        elif p.then is not None:  # (no keeper: the pool failed before it had one)
            p.then(False)

    def _spawn(self, node_id: str, initial: bool = False, watch: bool = True) -> Member:
        m = self._members.add(self._factory.creator(node_id), node_id, initial=initial)
        if watch:  # (the first wave is watched by first_ready)
            when_done(m.handle.ready.remote(), lambda f: self._on_ready(m, f.exception()))
        return m

    def _on_ready(self, m: Member, exc: BaseException | None) -> None:
        self._post(Post(m, Event.READY) if exc is None else Post(m, Event.START_FAILED, error=exc))

    def _on_first_ready(self, m: Member, exc: BaseException | None) -> None:
        """The first wave's answers, applied at once by the builder (it owns the table until the
        keeper starts), so the wait sees which actors are up; a failed first start is started
        again at once on its node, not after the wait for the others (another start's length)."""
        self._on_ready(m, exc)
        if self._keeper is None or not self._keeper.apply_posted():  # (a no-op on Ray's callback thread)
            return
        if exc is not None and m.state is State.DEAD and m.node_id not in self._keeper.held_off(time.monotonic()):
            self._spawn(m.node_id)

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
        if self._members.release(m, seq):
            self._post(Post())  # a draining actor is idle: the keeper stops it

    def _start(self, task: BatchTask, done: Done) -> None:
        m = self._members.pick(task.seq, self.deal(task.seq))
        if m is None:
            if not self._members.usable:
                raise WorkerLost(f"the {self.name} lane has no actor ({self.unavailable()})")
            self._post(Post(held=(task, done)))  # the keeper sends it once an actor is ready
            return
        self._send(m, task, done)

    def _send(self, m: Member, task: BatchTask, done: Done) -> None:
        """Start ``task`` on ``m`` (a lane with work to do first, off this thread, overrides it)."""
        self._watch(m, task, done, lambda: self.call(m.handle, task))

    def _watch(self, m: Member, task: BatchTask, done: Done, call) -> None:
        """Make the call (``call()``: its ObjectRef) and report its result to ``done`` once."""
        try:
            with m.send_lock:  # the order recorded is the order Ray runs the calls
                ref = call()
                self._members.sent(m, task.seq)
        except BaseException as exc:
            self._release(m, task.seq)
            done(task, exc)
            return

        def _finish(f):
            try:
                raw = f.result()
            except BaseException as exc:
                ran = self._members.was_running(m, task.seq) if actor_died(exc) else True
                self._release(m, task.seq)
                self._failed(m, task, exc, done, ran)
                return
            self._release(m, task.seq)
            report_converted(self.convert, task, raw, done)

        when_done(ref, _finish)

    def _failed(self, m: Member, task: BatchTask, exc: BaseException, done: Done, ran: bool = True) -> None:
        """Report a call that raised: `WorkerLost` when Ray lost its actor or could not reach it
        (the actor is then replaced), else the task's own error. A lost actor's report goes out
        through the keeper once the actor is out of the pick, so the retry never lands on it. A
        death counts against the batch the actor ran (``ran``), not the ones queued behind it."""
        if actor_unavailable(exc):
            lost = WorkerLost(f"actor {m.index} of the {self.name} lane did not answer for batch {task.seq}: {exc}")
            self._post(Post(m, Event.UNREACHABLE, then=lambda _moved: done(task, lost)))
            return
        if not actor_died(exc):
            done(task, self.failure(task, exc))
            return
        err = self._deaths.lost((task.epoch, task.seq, task.seed), task.seq, m.index, exc, ran=ran)

        def report(moved: bool) -> None:  # on the keeper's thread, once the table has it
            if moved:
                log.warning(
                    "Ray actor %d of the %s lane died (%s); batch %d goes to another worker, %d actors remain",
                    *(m.key, self.name, type(exc).__name__, task.seq, self.parallelism),
                )
            done(task, err)

        self._post(Post(m, Event.LOST, then=report))

    def _close(self) -> None:
        """Stop the keeper, kill every actor (by handle) and release the Ray connection."""
        try:
            if self._keeper is not None:
                self._keeper.close()
            import ray

            if ray.is_initialized():
                for m in self._members.members():  # (the keeper has stopped: the table is ours)
                    self._members.dead(m, lost=False)
                    kill_actor(m.handle)
        finally:
            cluster.release()
