"""An actor pool's member table, no Ray here: each actor moves through `LIFECYCLE` (shown on
docs/guide/cluster-changes.md, "An actor's life"); only the keeper applies events, and the lock
guards the loads that ``pick`` and ``release`` change on other threads, in O(1) whatever the pool's
size (READY members in buckets by load).

``usable``, the lane's capacity in actors, is the READY count; a pool that ``hold`` s (no local
stand-in) counts 1 while an actor starts, a lost one awaits its replacement or it waits for a node,
so it holds its batches rather than failing them in that moment."""

from __future__ import annotations

import enum
import heapq
import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Collection

from hybridload.lanes._ray.pool_stats import PoolStats


class State(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    DEAD = "dead"


class Event(enum.Enum):
    """What happens to an actor, whoever saw it (Ray's callback, the keeper's step, the pool)."""

    READY = "ready"  # its ready() answered
    START_FAILED = "start failed"  # it died or raised before it was ready, or outlasted its start bound
    LOST = "lost"  # its process or its node died
    UNREACHABLE = "unreachable"  # Ray could not reach it for a task (it may live on; not trusted again)
    DRAIN = "drain"  # its node is being drained, or the target no longer wants it
    STOPPED = "stopped"  # stopped on purpose: drained and idle, or the pool closes


S, E = State, Event
#: The actor lifecycle. "repair": a replacement is owed (the keeper starts it at once). A DEAD
#: member stays DEAD whatever is reported; a pair not listed here is refused (`IllegalTransition`).
LIFECYCLE: dict[tuple[State, Event], State] = {
    (S.STARTING, E.READY): S.READY,
    (S.STARTING, E.START_FAILED): S.DEAD,  # repair
    (S.STARTING, E.LOST): S.DEAD,  # repair
    (S.STARTING, E.UNREACHABLE): S.DRAINING,  # (a batch dealt to it while it started)
    (S.STARTING, E.DRAIN): S.DRAINING,  # stopped once idle
    (S.STARTING, E.STOPPED): S.DEAD,
    (S.READY, E.LOST): S.DEAD,  # repair
    (S.READY, E.UNREACHABLE): S.DRAINING,  # the target counts it out: its replacement starts
    (S.READY, E.DRAIN): S.DRAINING,
    (S.READY, E.STOPPED): S.DEAD,
    (S.DRAINING, E.READY): S.DRAINING,  # drained while it started: stopped once idle
    (S.DRAINING, E.START_FAILED): S.DEAD,  # repair
    (S.DRAINING, E.LOST): S.DEAD,  # repair
    (S.DRAINING, E.UNREACHABLE): S.DRAINING,  # a second batch on it found it unreachable
    (S.DRAINING, E.DRAIN): S.DRAINING,
    (S.DRAINING, E.STOPPED): S.DEAD,  # once idle
}
#: the events after which the pool owes a replacement
REPAIR = frozenset({E.START_FAILED, E.LOST})
del S, E


class IllegalTransition(ValueError):
    """An event `LIFECYCLE` refuses in a member's state (READY reported twice, a ready
    actor's start failing): a bug in whoever reported it; the member is left as it was."""


def next_state(state: State, event: Event) -> State:
    """Where ``event`` takes an actor in ``state`` (`LIFECYCLE`; DEAD stays DEAD).
    Raises `IllegalTransition` for a pair the table does not list."""
    if state is State.DEAD:
        return state
    try:
        return LIFECYCLE[(state, event)]
    except KeyError:
        raise IllegalTransition(f"{event.value!r} in state {state.name} is not in LIFECYCLE") from None


@dataclass(eq=False)
class Member:
    key: int
    handle: Any
    node_id: str
    index: int
    state: State = State.STARTING
    load: int = 0
    born: float = field(default_factory=time.monotonic)
    sent: list[int] = field(default_factory=list)  # seqs sent and not ended, in the order Ray runs them
    ran: int | None = None  # the seq it ran when it died (set at the first death report)
    send_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Members:
    """The table, under one lock; every change updates ``usable`` and the live-count samples."""

    def __init__(self, stats: PoolStats, hold: bool = True):
        self.stats = stats
        self.hold = hold
        self.usable = 0
        self.awaiting_repair = False
        self.waiting = False
        self._lock = threading.Lock()
        self._table: dict[int, Member] = {}
        self._running: dict[int, set[int]] = {}  # seq -> keys of the members running a copy
        self._next_key = 0
        self._counts: Counter = Counter()  # members per state
        self._by_load: list[dict[int, Member]] = []  # load -> READY members with that load, oldest first
        self._by_index: dict[int, Member] = {}  # worker index -> its live member (a batch dealt to it)
        self._free_index: list[int] = []  # worker indices given back (a heap: lowest first)
        self._next_index = 0

    # -- membership
    def add(self, handle_for, node_id: str, *, initial: bool) -> Member:
        """Register an actor started by ``handle_for(key, index)`` (its name and worker index)."""
        with self._lock:  # reserve a key and the lowest free worker index; Ray is called outside the lock
            key, self._next_key = self._next_key, self._next_key + 1
            if self._free_index:
                index = heapq.heappop(self._free_index)
            else:
                index, self._next_index = self._next_index, self._next_index + 1
        try:
            # never under the lock: creation can wait on Ray's callback thread, which may wait for
            # this lock in release()
            handle = handle_for(key, index)
        except BaseException:
            with self._lock:
                heapq.heappush(self._free_index, index)
            raise
        m = Member(key, handle, node_id, index)
        with self._lock:
            self._table[key] = m
            self._by_index[index] = m
            self._counts[State.STARTING] += 1
            self._changed()
        self.stats.actor_started(initial)
        return m

    def on(self, m: Member, event: Event) -> bool:
        """Apply ``event`` to ``m`` as `LIFECYCLE` says; False when its state stays. A member that
        dies leaves the table and frees its worker index. Raises `IllegalTransition`, ``m``
        unchanged."""
        with self._lock:
            state = next_state(m.state, event)
            if state is m.state:
                return False
            self._move(m, state)
            if state is State.DEAD:
                if self._table.pop(m.key, None) is not None:
                    heapq.heappush(self._free_index, m.index)
                    if self._by_index.get(m.index) is m:
                        del self._by_index[m.index]
                if event in REPAIR:
                    self.awaiting_repair = True
            self._changed()
        if event is Event.LOST:
            self.stats.actor_lost()
        elif event is Event.START_FAILED:
            self.stats.start_failed()
        return True

    def ready(self, m: Member) -> bool:
        return self.on(m, Event.READY)

    def dead(self, m: Member, *, lost: bool, failed_start: bool = False) -> bool:
        """Mark ``m`` dead: ``lost``, ``failed_start`` (the keeper tries again) or else stopped on
        purpose; False if it already was."""
        return self.on(m, Event.LOST if lost else Event.START_FAILED if failed_start else Event.STOPPED)

    def drain(self, m: Member, event: Event = Event.DRAIN) -> bool:
        """No more tasks for ``m`` (``event``: DRAIN or UNREACHABLE); True when it holds none (stop it now)."""
        self.on(m, event)
        with self._lock:
            return m.state is State.DRAINING and m.load == 0

    def consistent(self) -> list[str]:
        """What in the table disagrees with itself (empty: nothing): counts, buckets, indices."""
        with self._lock:
            live = list(self._table.values())
            wrong = [f"{m.key} is DEAD but in the table" for m in live if m.state is State.DEAD]
            counts = Counter(m.state for m in live)
            wrong += [
                f"{s.name}: counted {self._counts[s]}, holds {counts[s]}"
                for s in State
                if s is not State.DEAD and self._counts[s] != counts[s]
            ]
            filed = {k for bucket in self._by_load for k in bucket}
            ready = {m.key for m in live if m.state is State.READY}
            if filed != ready:
                wrong.append(f"READY buckets hold {sorted(filed)}, READY members are {sorted(ready)}")
            wrong += [
                f"{m.key} filed at load {load}, has {m.load}"
                for load, b in enumerate(self._by_load)
                for m in b.values()
                if m.load != load
            ]
            if len({m.index for m in live}) != len(live) or set(self._free_index) & {m.index for m in live}:
                wrong.append("a worker index is held twice")
            if self.usable != (self._counts[State.READY] or min(self.usable, 1)):
                wrong.append(f"usable {self.usable} with {self._counts[State.READY]} READY")
            return wrong

    def repaired(self) -> None:
        """The keeper has started what the target asks for after a loss."""
        with self._lock:
            self.awaiting_repair = False
            self._changed()

    def set_waiting(self, waiting: bool) -> None:
        """Whether the pool waits for a node (it holds its tasks meanwhile)."""
        with self._lock:
            if self.waiting != waiting:
                self.waiting = waiting
                self._changed()

    def members(self, *states: State) -> list[Member]:
        """Members in ``states`` (all when none given): READY first, then oldest first."""
        with self._lock:
            ms = [m for m in self._table.values() if not states or m.state in states]
        return sorted(ms, key=lambda m: (m.state is not State.READY, m.key))

    def count(self, state: State) -> int:
        with self._lock:
            return self._counts[state]

    # -- tasks
    def pick(self, seq: int, dealt: int | None = None) -> Member | None:
        """The member with worker index ``dealt`` while it is READY or STARTING (Ray queues a call
        to a starting actor) and runs no copy of ``seq``; else the least-loaded READY member,
        longest at that load, avoiding those running a copy of ``seq`` while another is READY."""
        with self._lock:
            busy_with = self._running.get(seq, ())
            m = self._by_index.get(dealt) if dealt is not None else None
            if m is not None and m.state in (State.READY, State.STARTING) and m.key not in busy_with:
                self._load(m, seq)
                return m
            m = next((r for bucket in self._by_load for r in _head(bucket, busy_with) if r.key not in busy_with), None)
            if m is None:  # every READY member runs a copy of seq already (or none is READY)
                m = next((r for bucket in self._by_load for r in bucket.values()), None)
            if m is None:
                return None
            self._load(m, seq)
            return m

    def _load(self, m: Member, seq: int) -> None:
        """``m`` takes a copy of ``seq`` (a READY member moves to its new load's bucket)."""
        ready = m.state is State.READY
        if ready:
            self._unfile(m)
        m.load += 1
        if ready:
            self._file(m)
        self._running.setdefault(seq, set()).add(m.key)

    def sent(self, m: Member, seq: int) -> None:
        """``m`` was sent ``seq`` (after the ones before it: an actor runs its calls in that order)."""
        with self._lock:
            m.sent.append(seq)

    def was_running(self, m: Member, seq: int) -> bool:
        """Whether ``m``, now dead, was running ``seq`` rather than holding it queued: the first
        report of its death fixes the one it ran, the oldest call not ended (each call before it
        ended first: an actor answers in order)."""
        with self._lock:
            if m.ran is None:
                m.ran = m.sent[0] if m.sent else seq
            return m.ran == seq

    def release(self, m: Member, seq: int) -> bool:
        """A task of ``m`` ended; True when ``m`` is draining and now idle (stop it)."""
        with self._lock:
            try:
                m.sent.remove(seq)
            except ValueError:  # a call not sent through the watch (run_batch)
                pass
            ready = m.state is State.READY
            if ready:
                self._unfile(m)
            m.load -= 1
            if ready:
                self._file(m)
            holders = self._running.get(seq)
            if holders is not None:
                holders.discard(m.key)
                if not holders:
                    del self._running[seq]
            return m.state is State.DRAINING and m.load == 0

    def _move(self, m: Member, state: State) -> None:
        """``m`` changes state: the counts and the READY buckets follow."""
        if m.state is State.READY:
            self._unfile(m)
        self._counts[m.state] -= 1  # never DEAD here: a dead member changes no more
        m.state = state
        if state is not State.DEAD:
            self._counts[state] += 1
        if state is State.READY:
            self._file(m)

    def _file(self, m: Member) -> None:
        while len(self._by_load) <= m.load:
            self._by_load.append({})
        self._by_load[m.load][m.key] = m

    def _unfile(self, m: Member) -> None:
        self._by_load[m.load].pop(m.key, None)

    def _changed(self) -> None:
        ready = self._counts[State.READY]
        starting = self._counts[State.STARTING] > 0
        self.usable = ready or (1 if self.hold and (starting or self.awaiting_repair or self.waiting) else 0)
        self.stats.live(ready)


def _head(bucket: dict[int, Member], avoid: Collection[int]):
    """The first members of a bucket, one more than ``avoid`` holds (a task has at most two copies)."""
    return itertools.islice(bucket.values(), len(avoid) + 1)
