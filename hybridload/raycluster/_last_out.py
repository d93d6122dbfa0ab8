"""The rank that started a job's embedded Ray cluster leaves it last: an exit hook, run before
Ray's own, waits (bounded) for the ranks that joined, which Ray would otherwise end with exit
status 1 under a finished job (docs/guide/cluster.md)."""

from __future__ import annotations

import atexit
import logging
import os
import time
from typing import Callable, Iterable, Mapping

from hybridload import _compat as compat

log = logging.getLogger(__name__)

WAIT_S = 30.0  # torchrun's grace between SIGTERM and SIGKILL


def other_live_drivers(jobs: Iterable[Mapping], me: int, alive: Callable[[int], bool]) -> list[int]:
    """Pure: the pids of drivers in Ray's job table that are not dead, not ``me``, and alive."""
    pids = []
    for job in jobs:
        pid = int(job.get("DriverPid") or 0)
        if pid > 0 and pid != me and not job.get("IsDead") and alive(pid):
            pids.append(pid)
    return sorted(pids)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        pass
    return True


def wait_for_joined_ranks(ray, timeout_s: float = WAIT_S, poll_s: float = 0.2) -> list[int]:
    """Wait until no other driver is connected to this process's cluster, at most ``timeout_s``;
    returns the pids still connected then (empty when every joined rank left)."""
    deadline = time.monotonic() + timeout_s
    left: list[int] = []
    while ray.is_initialized():
        try:
            left = other_live_drivers(compat.ray_jobs(), os.getpid(), _pid_alive)
        except Exception as exc:  # the cluster is already going: nothing to wait for
            log.debug("cannot read Ray's job table at exit (%s)", exc)
            return []
        if not left or time.monotonic() > deadline:
            break
        time.sleep(poll_s)
    if left:
        log.warning(
            "ranks %s are still connected to this job's embedded Ray cluster after %g s; shutting it down under them",
            left,
            timeout_s,
        )
    return left


def stay_until_joined_ranks_leave(ray, timeout_s: float = WAIT_S) -> None:
    """At interpreter exit, before Ray shuts the cluster down, wait for the joined ranks."""
    atexit.register(wait_for_joined_ranks, ray, timeout_s)
