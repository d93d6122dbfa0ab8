"""What a drop-in pass offers of torch's iterator's ``_workers``: read-only stand-ins of its Ray
actors (`WorkerHandle`), which answer what code written for torch's worker processes asks of
them (``is_alive()``, ``join(timeout)``, ``exitcode``, ``terminate()``), e.g. that the workers
end once the iterator and its loader are dropped. No pid: an actor's process may be on another
node, and its id on this machine would name another process."""

from __future__ import annotations

import time
from typing import Any


class WorkerHandle:
    """One actor of ``pool`` (``actor``: its Ray handle) as torch's iterator lists a worker process.

    Alive while its pool is open and holds it; ``exitcode`` None while alive, 0 once its pool
    was closed (its loader stopped it, as torch's workers exit 0 at shutdown), 1 when it was
    lost while the pool ran (killed, crashed)."""

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
