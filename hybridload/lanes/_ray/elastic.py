"""The keeper: the one thread that owns an actor pool's member table. Every other thread posts what
it saw (`Post`); the keeper applies each as a `LIFECYCLE` transition (a pair the table refuses is
logged as a bug), does what it asks (kill, repair, note why), then runs the post's ``then``, so a
task's report goes out only once its actor is out of the table. It reaches the pool through `Actors`
and its `Capacity`, and steps every ``poll_s`` or at once when a post asks (the step, failed starts
and start bounds: docs/guide/cluster-changes.md, "How the pool keeps its target"; the design:
docs/decisions/pool-keeper-owns-the-table.md)."""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from hybridload import _compat as compat
from hybridload.raycluster._connect import NodeInfo
from hybridload._environment import seconds_setting
from hybridload.raycluster._placement import reconcile

from hybridload.errors import WorkerLost
from hybridload.lanes._base import BatchTask, Done
from hybridload.lanes._ray.capacity import Capacity
from hybridload.lanes._ray.members import Event, IllegalTransition, Member, Members, State

log = logging.getLogger(__name__)

#: how often the node table is read when the policy does not say (seconds)
DEFAULT_POLL_S = 5.0
#: a node's start bound grows (doubling) to at most this many times ``ready_timeout_s``
MAX_START_BOUND_FACTOR = 8


class RayShutDown(Exception):
    """This process's Ray connection is gone: the keeper stops."""


Table = Callable[[], "tuple[list[NodeInfo], set[str]]"]


def node_table() -> tuple[list[NodeInfo], set[str]]:
    """The alive nodes (as placement sees them) and the ids of those being drained."""
    import ray

    from hybridload.raycluster import _connect as cluster

    if not ray.is_initialized():
        raise RayShutDown("Ray is shut down")
    nodes = cluster.nodes()
    try:
        draining = compat.ray_draining_nodes()
    except Exception as exc:  # an older or newer Ray without it: drains are seen as removals
        log.debug("cannot read Ray's draining nodes: %s", exc)
        draining = set()
    return nodes, draining


def poll_seconds(node_poll_s: float | None, env=os.environ) -> float:
    """The keeper's poll interval: the argument, else HYBRIDLOAD_NODE_POLL_S, else the default."""
    return seconds_setting(node_poll_s, "HYBRIDLOAD_NODE_POLL_S", DEFAULT_POLL_S, arg="node_poll_s", env=env)


def next_start_bound(bound_s: float, ready_timeout_s: float) -> float:
    """A node's start bound after a start there ran past ``bound_s``: twice it, at most
    ``MAX_START_BOUND_FACTOR`` x ``ready_timeout_s``."""
    return min(2.0 * bound_s, MAX_START_BOUND_FACTOR * ready_timeout_s)


def retry_now(last_failed: float | None, now: float, poll_s: float) -> bool:
    """A failed start is tried again at once unless one on that node failed within ``poll_s``, so a
    node refusing every start is no tight loop."""
    return last_failed is None or now - last_failed >= poll_s


class Actors(Protocol):
    """What the keeper asks of the pool: the Ray side of its actors."""

    def start_actor(self, node_id: str) -> Member:
        """Start an actor on ``node_id``, register it in the table, watch its ``ready()``."""
        ...

    def stop_actor(self, m: Member) -> None:
        """Kill ``m``'s actor by handle."""
        ...

    def probe_actor(self, m: Member) -> None:
        """Ask an idle ready actor whether it lives (its answer is posted back)."""
        ...

    def send_held(self, m: Member, task: BatchTask, done: Done) -> None:
        """Start a task held while no actor was ready on ``m`` (picked for it)."""
        ...


@dataclass(frozen=True)
class Post:
    """One report into the keeper's inbox.

    Attributes:
        member: the actor it is about (None: only the fields below).
        event: what happened to ``member`` (a `LIFECYCLE` event), or None.
        error: why its start failed, for the pool's reasons.
        held: a ``(task, done)`` given while no actor was ready: the keeper holds it.
        then: run on the keeper's thread once the post is applied, told whether ``event`` moved the
            member.
        step: whether a post with no event asks for a step now.
    """

    member: Member | None = None
    event: Event | None = None
    error: BaseException | None = None
    held: tuple[BatchTask, Done] | None = None
    then: Callable[[bool], None] | None = None
    step: bool = True


class Keeper:
    """Keeps ``members`` on ``capacity.target(nodes, draining)``; the only thread that moves it.

    Args:
        members: the pool's table.
        actors: the pool's hands (`Actors`).
        capacity: the target's rules and what the pool does while it is empty (`Capacity`).
        poll_s: seconds between looks at the node table.
        ready_timeout_s: an actor's first start bound.
        table: reads the node table (``node_table`` by default).
        name: the lane's name, for messages.
        known: the nodes the pool started on (what "joined" and "left" compare with).
    """

    def __init__(
        self,
        members: Members,
        actors: Actors,
        capacity: Capacity,
        *,
        poll_s: float = DEFAULT_POLL_S,
        ready_timeout_s: float = 120.0,
        table: Table = node_table,
        name: str = "pool",
        known: Sequence[NodeInfo] = (),
    ):
        self.members, self.actors, self.capacity = members, actors, capacity
        self.poll_s, self.ready_timeout_s, self._table = poll_s, ready_timeout_s, table
        self._inbox: deque[Post] = deque()
        self._held: deque[tuple[BatchTask, Done]] = deque()  # given while no actor was ready, in order
        self._post_lock = threading.Lock()  # a post and close(): none is left unanswered
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._name = name
        self._thread: threading.Thread | None = None
        self._owner = threading.current_thread()  # who applies posts: the builder until start()
        self._known = {n.node_id: n for n in known}
        self._draining_seen: set[str] = set()
        self._start_bounds: dict[str, float] = {}  # node id -> its start bound, once a start there ran past it
        self._failed_at: dict[str, float] = {}  # node id -> when a start there last failed (monotonic)
        self._held_off: dict[str, float] = {}  # node id -> until when no start goes there (monotonic)
        self._last_step = time.monotonic()

    # -- every thread
    def post(self, p: Post) -> None:
        """Put ``p`` in the inbox and wake the keeper; once closed, only run its ``then``."""
        with self._post_lock:
            if not self._closed.is_set():
                self._inbox.append(p)
                self._wake.set()
                return
        if p.then is not None:
            p.then(False)

    def wake(self) -> None:
        """A step soon, whatever the clock."""
        self.post(Post())

    def start(self) -> None:
        """Hand the table to the keeper's thread (the builder applies posts until then)."""
        if self.members.awaiting_repair:  # a start failed before the keeper ran: its first step now
            self.wake()
        self._thread = threading.Thread(
            target=_run,
            args=(weakref.ref(self), self._wake, self._closed),
            name=f"hybridload-{self._name}-keeper",
            daemon=True,
        )
        self._owner = self._thread
        self._thread.start()

    def close(self, join_timeout_s: float = 10.0) -> None:
        """Stop the thread; answer the posts it left (``then(False)``); drop the held tasks."""
        with self._post_lock:
            self._closed.set()
            self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(join_timeout_s)
        self._owner = threading.current_thread()
        while self._inbox:
            p = self._inbox.popleft()
            if p.then is not None:
                p.then(False)
        self._held.clear()

    # -- the owner's thread
    def apply_posted(self) -> bool:
        """Apply what was posted, in order; True when one asks for a step now. A no-op on any thread
        but the owner's (the builder, then the keeper's thread)."""
        if threading.current_thread() is not self._owner:
            return False
        due = False
        while self._inbox:
            p = self._inbox.popleft()
            try:
                due = self._apply(p) or due
            except Exception:  # a bug in one post's handling must not stop the pool's upkeep
                log.exception("%s: the keeper could not apply %s", self._name, p)
        return due

    def _apply(self, p: Post) -> bool:
        moved = False
        try:
            if p.held is not None:
                self._held.append(p.held)
                return True
            if p.member is None or p.event is None:
                return p.step
            moved = self.transition(p.member, p.event, p.error)
            return moved and (p.event is not Event.START_FAILED or self._retry_now(p.member.node_id))
        finally:
            if p.then is not None:
                p.then(moved)

    def transition(self, m: Member, event: Event, error: BaseException | None = None) -> bool:
        """Apply ``event`` to ``m`` and do what it asks of the pool; False when ``m`` stays. A pair
        `LIFECYCLE` refuses is logged as a bug and changes nothing."""
        try:
            moved = self.members.on(m, event)
        except IllegalTransition as exc:
            log.error(
                "%s: BUG: actor %d (node %s) was reported %r in state %s, which LIFECYCLE does not allow (%s); "
                "left as it was",
                *(self._name, m.key, m.node_id[:8], event.value, m.state.name, exc),
            )
            return False
        if not moved:
            return False
        if event is Event.START_FAILED:
            self.actors.stop_actor(m)  # a live actor whose start raised would hold its CPU until collected
            if error is not None:
                self.capacity.start_failed(m.key, m.node_id, error)
        elif event in (Event.LOST, Event.STOPPED):
            self.actors.stop_actor(m)
        return True

    def _retry_now(self, node_id: str) -> bool:
        """A start on ``node_id`` failed: a step now, else (`retry_now`) none there for ``poll_s``."""
        now = time.monotonic()
        again = retry_now(self._failed_at.get(node_id), now, self.poll_s)
        if not again:
            self._held_off[node_id] = now + self.poll_s
        self._failed_at[node_id] = now
        return again

    def held_off(self, now: float) -> set[str]:
        """The nodes no start goes to at ``now`` (monotonic): two failed there within ``poll_s``."""
        self._held_off = {n: until for n, until in self._held_off.items() if until > now}
        return set(self._held_off)

    def next_look_s(self, now: float) -> float:
        """Seconds until the keeper's next step: ``poll_s`` after the last, or less when a hold-off ends sooner."""
        ends = [until - now for until in self._held_off.values() if until > now]
        return max(0.0, min([self._last_step + self.poll_s - now, *ends]))

    def start_bound(self, node_id: str) -> float:
        """How long an actor's start on ``node_id`` may take before it is stopped and tried again."""
        return self._start_bounds.get(node_id, self.ready_timeout_s)

    def step(self) -> None:
        """One look at the node table and what the pool does about it."""
        self._last_step = time.monotonic()
        nodes, draining = self._table()
        if self._closed.is_set():
            return
        alive = {n.node_id for n in nodes}
        self._node_events(nodes, draining)
        self.apply_posted()  # what came in while the table was read: a start just ready is not stopped for its bound
        now = time.monotonic()
        for m in self.members.members(State.STARTING, State.READY, State.DRAINING):
            if m.node_id not in alive:
                if self.transition(m, Event.LOST):
                    log.warning("%s: node %s left the cluster; its actor %d is lost", self._name, m.node_id[:8], m.key)
            elif m.node_id in draining and m.state is not State.DRAINING:
                log.info(
                    "%s: node %s is being drained; actor %d finishes its tasks and stops",
                    self._name,
                    m.node_id[:8],
                    m.key,
                )
                self._drain(m)
            elif m.state is State.STARTING and now - m.born > self.start_bound(m.node_id):
                bound = self.start_bound(m.node_id)
                self._start_bounds[m.node_id] = next_start_bound(bound, self.ready_timeout_s)
                log.warning(
                    "%s: actor %d did not start on node %s within %g s; trying again, with %g s",
                    self._name,
                    m.key,
                    m.node_id[:8],
                    bound,
                    self._start_bounds[m.node_id],
                )
                self.transition(m, Event.START_FAILED)
            elif m.state is State.DRAINING and m.load == 0:
                self._retire(m)
            elif m.state is State.READY and m.load == 0:
                self.actors.probe_actor(m)
        target = self.capacity.target(nodes, draining)
        live = self.members.members(State.READY, State.STARTING)
        changes = reconcile(target, [(m.key, m.node_id) for m in live])
        by_key = {m.key: m for m in live}
        for key in changes.stop:
            self._drain(by_key[key])
        held_off = self.held_off(now)
        for node_id in changes.start:
            if self._closed.is_set():
                return
            if node_id in held_off:  # tried when its hold-off ends (the loop wakes for it)
                continue
            m = self.actors.start_actor(node_id)
            log.info("%s: actor %d starting on node %s (target %d)", self._name, m.key, node_id[:8], len(target))
        self.members.stats.live(self.members.count(State.READY), len(target))
        self.capacity.after_step(target, nodes)
        if not held_off & set(changes.start):  # else a lost actor still awaits its replacement
            self.members.repaired()
        self.flush()

    def flush(self) -> None:
        """Send the held tasks to ready actors; fail them when no actor can come; drop them once
        closed."""
        while self._held:
            if self._closed.is_set():
                self._held.clear()
                return
            if not self.members.usable:
                task, done = self._held.popleft()
                why = self.capacity.unavailable()
                done(task, WorkerLost(f"no Ray actor of the {self._name} lane can take batch {task.seq} ({why})"))
                continue
            m = self.members.pick(self._held[0][0].seq)
            if m is None:
                return
            task, done = self._held.popleft()
            self.actors.send_held(m, task, done)

    def _node_events(self, nodes: Sequence[NodeInfo], draining: set[str]) -> None:
        """Tell the capacity of each node that joined, left or began draining since the last look."""
        now = {n.node_id: n for n in nodes}
        events = [("joined", n) for nid, n in now.items() if nid not in self._known]
        events += [("left", n) for nid, n in self._known.items() if nid not in now]
        events += [("draining", now[nid]) for nid in draining - self._draining_seen if nid in now]
        self._known, self._draining_seen = now, set(draining) & set(now)
        for event, n in events:
            self.capacity.on_node(event, n)

    def _drain(self, m: Member) -> None:
        if self.members.drain(m):
            self._retire(m)

    def _retire(self, m: Member) -> None:
        if self.transition(m, Event.STOPPED):
            self.members.stats.actor_stopped()


def _run(ref, wake: threading.Event, closed: threading.Event) -> None:
    """The keeper's loop; holds the keeper only weakly, so an abandoned pool can be collected."""
    while not closed.is_set():
        keeper = ref()
        if keeper is None:
            return
        wait_s = keeper.next_look_s(time.monotonic())
        del keeper
        wake.wait(wait_s)
        wake.clear()
        keeper = ref()
        if keeper is None or closed.is_set():
            return
        try:
            if keeper.apply_posted() or keeper.next_look_s(time.monotonic()) <= 0:
                keeper.step()
        except RayShutDown:  # Ray was shut down (interpreter exit): nothing left to keep
            return
        except Exception as exc:  # Ray shutting down, a GCS hiccup: try again next time
            log.warning(
                "the actor pool's keeper could not read the cluster (%s: %s); trying again in %g s",
                type(exc).__name__,
                exc,
                keeper.poll_s,
            )
        del keeper
