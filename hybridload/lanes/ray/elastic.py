"""The keeper of an elastic actor pool: a small thread that keeps the pool on its target.

Every ``poll_s`` seconds, and at once when the pool reports a lost actor, a failed start or
an actor that became ready, it reads the cluster's node table and takes one step:

1. actors on nodes gone from the table are lost; actors on nodes being drained (Ray's drain
   API, as autoscalers and spot handlers use it) stop taking tasks and are stopped once idle;
   an actor still not ready after its node's start bound (``ready_timeout_s`` at first) is
   stopped (its start failed); each idle ready actor is asked whether it lives (``probe``:
   otherwise its death is seen only when its next task fails);
2. the target is the placement rules applied to the table as it is now
   (`hybridload.raycluster.placement.elastic_target`); `reconcile`
   says which actors to start (replacements, growth onto nodes that joined) and which to
   drain (the target no longer wants them);
3. the pool hears of the step (``after_step(target, nodes)``: what it does while the target
   is empty, `hybridload.lanes.ray.capacity`) and of every node that joined, left or
   began draining since the last look (``on_node(event, node)``);
4. tasks the pool held while it had no ready actor go out.

A start that failed (the actor died or raised before it was ready: killed from outside, OOM)
is tried again at once (`Keeper.start_failed` wakes the keeper), unless a start on that node
already failed within ``poll_s``: then no step starts one there (whatever woke the keeper)
for ``poll_s``, so a node that refuses every start (dead but still listed) costs at most two
tries per ``poll_s``, not a tight loop; waiting a poll after every failure would cost the pool
up to ``poll_s`` without that actor per failed start. A start slower than its bound is
stopped and tried again with twice the bound on that node (`next_start_bound`), so a loaded
machine whose starts take longer than ``ready_timeout_s`` gets its actors instead of
restarting them forever, while a start that hangs for good is still stopped. Nothing here
runs on the dispatcher's path: the dispatcher sees the result only as the lane's ``slots``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Callable, Sequence

from hybridload import compat
from hybridload.raycluster.connect import NodeInfo
from hybridload.environment import seconds_setting
from hybridload.raycluster.placement import reconcile

from hybridload.lanes.ray.members import Member, Members, State

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

    from hybridload.raycluster import connect as cluster

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
    """A node's bound for an actor's start after a start there ran past ``bound_s``: twice it,
    at most ``MAX_START_BOUND_FACTOR`` x ``ready_timeout_s`` (120 s: 240, 480, then 960 s)."""
    return min(2.0 * bound_s, MAX_START_BOUND_FACTOR * ready_timeout_s)


def retry_now(last_failed: float | None, now: float, poll_s: float) -> bool:
    """Whether a failed start on a node is tried again at once: yes, unless one there failed
    within the last ``poll_s`` (then the next regular poll tries it)."""
    return last_failed is None or now - last_failed >= poll_s


class Keeper:
    """Keeps ``members`` on ``target(nodes, draining)``.

    Args:
        members: the pool's table.
        target: node ids wanted for the table as it is now (placement rules bound).
        spawn: starts an actor on a node id and registers it (returns the member).
        stop: kills a member's actor (by handle).
        flush: sends the tasks the pool held.
        table: reads the node table (``node_table`` by default).
        after_step: told the target and the node table after each step's changes.
        on_node: told each node event ("joined", "left", "draining") since the last look.
        probe: asks an idle ready member whether its actor lives (the pool reports a death).
        known: the nodes the pool started on (what "joined" and "left" compare with).
    """

    def __init__(
        self,
        members: Members,
        *,
        target: Callable[[Sequence[NodeInfo], set[str]], list[str]],
        spawn: Callable[[str], Member],
        stop: Callable[[Member], None],
        flush: Callable[[], None],
        poll_s: float = DEFAULT_POLL_S,
        ready_timeout_s: float = 120.0,
        table: Table = node_table,
        name: str = "pool",
        after_step: Callable | None = None,
        on_node: Callable[[str, NodeInfo], None] | None = None,
        known: Sequence[NodeInfo] = (),
        probe: Callable[[Member], None] | None = None,
    ):
        self.members, self._target, self._spawn, self._stop, self._flush = members, target, spawn, stop, flush
        self.poll_s, self.ready_timeout_s, self._table = poll_s, ready_timeout_s, table
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._name = name
        self._thread: threading.Thread | None = None
        self._after_step, self._on_node, self._probe = after_step, on_node, probe
        self._known = {n.node_id: n for n in known}
        self._draining_seen: set[str] = set()
        self._start_bounds: dict[str, float] = {}  # node id -> its start bound, once a start there ran past it
        self._failed_at: dict[str, float] = {}  # node id -> when a start there last failed (monotonic)
        self._held_off: dict[str, float] = {}  # node id -> until when no start goes there (monotonic)
        self._lock = threading.Lock()  # the two above: written on Ray's callback thread, read by the step

    def start(self) -> None:
        if self.members.awaiting_repair:  # a start failed before the keeper ran: its first step now
            self._wake.set()
        self._thread = threading.Thread(
            target=_run,
            args=(weakref.ref(self), self._wake, self._closed, self.poll_s),
            name=f"hybridload-{self._name}-keeper",
            daemon=True,
        )
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def start_failed(self, node_id: str) -> None:
        """An actor's start on ``node_id`` failed: a step now, else (`retry_now`) none there for ``poll_s``."""
        now = time.monotonic()
        with self._lock:
            again = retry_now(self._failed_at.get(node_id), now, self.poll_s)
            if not again:
                self._held_off[node_id] = now + self.poll_s
            self._failed_at[node_id] = now
        if again:
            self._wake.set()

    def held_off(self, now: float) -> set[str]:
        """The nodes no start goes to at ``now`` (monotonic): two failed there within ``poll_s``."""
        with self._lock:
            self._held_off = {n: until for n, until in self._held_off.items() if until > now}
            return set(self._held_off)

    def next_look_s(self, now: float) -> float:
        """Seconds until the keeper's next step: ``poll_s``, or less when a hold-off ends sooner."""
        with self._lock:
            return min([self.poll_s, *(until - now for until in self._held_off.values() if until > now)])

    def start_bound(self, node_id: str) -> float:
        """How long an actor's start on ``node_id`` may take before it is stopped and tried again."""
        return self._start_bounds.get(node_id, self.ready_timeout_s)

    def close(self, join_timeout_s: float = 10.0) -> None:
        self._closed.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(join_timeout_s)

    def step(self) -> None:
        """One look at the node table and what the pool does about it."""
        nodes, draining = self._table()
        if self._closed.is_set():
            return
        alive = {n.node_id for n in nodes}
        self._node_events(nodes, draining)
        now = time.monotonic()
        for m in self.members.members(State.STARTING, State.READY, State.DRAINING):
            if m.node_id not in alive:
                if self.members.dead(m, lost=True):
                    log.warning("%s: node %s left the cluster; its actor %d is lost", self._name, m.node_id[:8], m.key)
                self._stop(m)
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
                if self.members.dead(m, lost=False, failed_start=True):  # (not if it became ready just now)
                    self._stop(m)
            elif m.state is State.DRAINING and m.load == 0:
                self._retire(m)
            elif m.state is State.READY and m.load == 0 and self._probe is not None:
                self._probe(m)
        target = self._target(nodes, draining)
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
            m = self._spawn(node_id)
            log.info("%s: actor %d starting on node %s (target %d)", self._name, m.key, node_id[:8], len(target))
        self.members.stats.live(self.members.count(State.READY), len(target))
        if self._after_step is not None:
            self._after_step(target, nodes)
        if not held_off & set(changes.start):  # else a lost actor still awaits its replacement
            self.members.repaired()
        self._flush()

    def _node_events(self, nodes: Sequence[NodeInfo], draining: set[str]) -> None:
        """Tell ``on_node`` of each node that joined, left or began draining since the last look."""
        now = {n.node_id: n for n in nodes}
        events = [("joined", n) for nid, n in now.items() if nid not in self._known]
        events += [("left", n) for nid, n in self._known.items() if nid not in now]
        events += [("draining", now[nid]) for nid in draining - self._draining_seen if nid in now]
        self._known, self._draining_seen = now, set(draining) & set(now)
        for event, n in events:
            if self._on_node is not None:
                self._on_node(event, n)

    def _drain(self, m: Member) -> None:
        if self.members.drain(m):
            self._retire(m)

    def _retire(self, m: Member) -> None:
        if self.members.dead(m, lost=False):
            self.members.stats.actor_stopped()
        self._stop(m)


def _run(ref, wake: threading.Event, closed: threading.Event, poll_s: float) -> None:
    """The keeper's loop; holds the keeper only weakly, so an abandoned pool can be collected."""
    while not closed.is_set():
        keeper = ref()
        wait_s = poll_s if keeper is None else keeper.next_look_s(time.monotonic())
        del keeper
        wake.wait(wait_s)
        wake.clear()
        keeper = ref()
        if keeper is None or closed.is_set():
            return
        try:
            keeper.step()
        except RayShutDown:  # Ray was shut down (interpreter exit): nothing left to keep
            return
        except Exception as exc:  # Ray shutting down, a GCS hiccup: try again next time
            log.warning(
                "the actor pool's keeper could not read the cluster (%s: %s); trying again in %g s",
                type(exc).__name__,
                exc,
                poll_s,
            )
        del keeper
