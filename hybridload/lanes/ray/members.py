"""An actor pool's membership table: its actors, their state and load. No Ray here.

An actor is STARTING until its ``ready()`` answers, READY while it takes tasks, DRAINING
when its node is being drained or the target no longer wants it (it finishes what it holds,
then is stopped), DEAD when lost or stopped (then it leaves the table).

``usable`` — the lane's capacity in actors, read lock-free by the dispatcher through the
lane's ``slots`` — is the READY count. A pool that ``hold`` s (no local lane stands in for it)
counts 1 while none is READY but one is STARTING, a lost actor awaits its replacement, or it
is ``waiting`` for a node (``on_no_actors="wait"``): the lane holds what it is given until an
actor is ready (so losing the last actor does not fail every batch in the moment before its
replacement starts). A pool that does not hold counts only READY actors: while it has none,
the dispatcher gives the batches to the local stand-in.
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from hybridload.lanes.ray.pool_stats import PoolStats


class State(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    DEAD = "dead"


@dataclass(eq=False)
class Member:
    key: int
    handle: Any
    node_id: str
    index: int
    state: State = State.STARTING
    load: int = 0
    born: float = field(default_factory=time.monotonic)


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
        self._reserved: set[int] = set()  # worker indices of actors being created

    # -- membership
    def add(self, handle_for, node_id: str, *, initial: bool) -> Member:
        """Register an actor started by ``handle_for(key, index)`` (its name and worker index)."""
        with self._lock:  # reserve a key and a worker index; Ray is called outside the lock
            key, self._next_key = self._next_key, self._next_key + 1
            used = {m.index for m in self._table.values()} | self._reserved
            index = next(i for i in range(len(used) + 1) if i not in used)
            self._reserved.add(index)
        try:
            # never under the lock: actor creation can wait on Ray's callback thread, which
            # may itself be waiting for this lock in release() (a deadlock seen in test_faults)
            handle = handle_for(key, index)
        finally:
            with self._lock:
                self._reserved.discard(index)
        m = Member(key, handle, node_id, index)
        with self._lock:
            self._table[key] = m
            self._changed()
        self.stats.actor_started(initial)
        return m

    def ready(self, m: Member) -> bool:
        with self._lock:
            if m.state is not State.STARTING:
                return False
            m.state = State.READY
            self._changed()
            return True

    def dead(self, m: Member, *, lost: bool, failed_start: bool = False) -> bool:
        """Mark ``m`` dead (``lost``: not stopped on purpose; ``failed_start``: it never became
        ready, the keeper tries again); False if it already was."""
        with self._lock:
            if m.state is State.DEAD:
                return False
            m.state = State.DEAD
            self._table.pop(m.key, None)
            if lost or failed_start:
                self.awaiting_repair = True
            self._changed()
        if lost:
            self.stats.actor_lost()
        return True

    def drain(self, m: Member) -> bool:
        """No more tasks for ``m``; True when it holds none (stop it now)."""
        with self._lock:
            if m.state in (State.READY, State.STARTING):
                m.state = State.DRAINING
                self._changed()
            return m.state is State.DRAINING and m.load == 0

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
            return sum(m.state is state for m in self._table.values())

    # -- tasks
    def pick(self, seq: int) -> Member | None:
        """The least-loaded READY member, avoiding those already running a copy of ``seq``."""
        with self._lock:
            ready = [m for m in self._table.values() if m.state is State.READY]
            if not ready:
                return None
            busy_with = self._running.get(seq, set())
            m = min(ready, key=lambda r: (r.key in busy_with, r.load))
            m.load += 1
            self._running.setdefault(seq, set()).add(m.key)
            return m

    def release(self, m: Member, seq: int) -> bool:
        """A task of ``m`` ended; True when ``m`` is draining and now idle (stop it)."""
        with self._lock:
            m.load -= 1
            holders = self._running.get(seq)
            if holders is not None:
                holders.discard(m.key)
                if not holders:
                    del self._running[seq]
            return m.state is State.DRAINING and m.load == 0

    def _changed(self) -> None:
        ready = sum(m.state is State.READY for m in self._table.values())
        starting = any(m.state is State.STARTING for m in self._table.values())
        self.usable = ready or (1 if self.hold and (starting or self.awaiting_repair or self.waiting) else 0)
        self.stats.live(ready)
