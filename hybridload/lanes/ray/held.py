"""The tasks an actor pool was given while none of its actors was ready (starting, replaced,
or waiting for a node under ``on_no_actors="wait"``): kept in the order given, sent as actors
become ready, failed with `WorkerLost` once no actor can come. The keeper flushes them after
each step and whenever an actor becomes ready."""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable

from hybridload.errors import WorkerLost
from hybridload.lanes.base import BatchTask, Done
from hybridload.lanes.ray.members import Member, Members


class HeldTasks:
    """``(task, done)`` pairs waiting for a ready actor of ``members``."""

    def __init__(self, members: Members):
        self._members = members
        self._held: deque = deque()
        self._lock = threading.Lock()

    def hold(self, task: BatchTask, done: Done) -> None:
        with self._lock:
            self._held.append((task, done))

    def flush(
        self,
        send: Callable[[Member, BatchTask, Done], None],
        *,
        closed: Callable[[], bool],
        why: Callable[[], str],
        name: str,
    ) -> None:
        """Send the held tasks to ready actors (``send``); fail them when no actor can come
        (``why()`` says why); drop them once the pool is ``closed()``."""
        while True:
            with self._lock:
                if not self._held:
                    return
                if closed():
                    self._held.clear()
                    return
                if not self._members.usable:
                    task, done = self._held.popleft()
                    m = None
                else:
                    m = self._members.pick(self._held[0][0].seq)
                    if m is None:
                        return
                    task, done = self._held.popleft()
            if m is None:
                done(task, WorkerLost(f"no Ray actor of the {name} lane can take batch {task.seq} ({why()})"))
            else:
                send(m, task, done)
