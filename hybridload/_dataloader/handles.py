"""Read-only stand-ins of a pass's Ray actors as torch's iterator's ``_workers`` (`WorkerHandle`),
for code written for worker processes; no pid, since an actor may run on another node."""

from __future__ import annotations

import time
from typing import Any


class WorkerHandle:
    """One actor of ``pool`` as torch lists a worker process: alive while its pool holds it;
    ``exitcode`` None while alive, 0 once its pool closed, 1 when lost while the pool ran."""

    def __init__(self, pool: Any, actor: Any, index: int):
        self._pool, self._actor, self.name = pool, actor, f"hybridload Ray worker {index}"

    def is_alive(self) -> bool:
        return not self._pool.closed and any(a is self._actor for a in self._pool.actors)

    def join(self, timeout: float | None = None) -> None:
        """Return once the actor has stopped, or after ``timeout`` seconds (None: no bound)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.is_alive() and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.02)

    @property
    def exitcode(self) -> int | None:
        if self.is_alive():
            return None
        return 0 if self._pool.closed else 1

    def terminate(self) -> None:
        """Kill the actor now (its pool then runs its batches on another, as after a lost worker)."""
        if self.is_alive():
            import ray

            ray.kill(self._actor, no_restart=True)

    kill = terminate

    def __repr__(self) -> str:
        state = "alive" if self.is_alive() else f"exitcode={self.exitcode}"
        return f"<WorkerHandle {self.name} {state}>"


def worker_handles(pool: Any) -> list[WorkerHandle]:
    """``pool``'s actors now, as torch's ``_workers``."""
    return [WorkerHandle(pool, a, k) for k, a in enumerate(pool.actors)]
