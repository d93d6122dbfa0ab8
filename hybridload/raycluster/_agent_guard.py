"""Ray's two node agents of the embedded cluster end with its raylet, even under a SIGKILLed
trainer, instead of holding ~190 MB for 60 s reporting to a dead GCS (docs/guide/cluster.md).
Run as ``python -I -S`` on this file (stdlib only); it signals only those agents, each checked by
its start time, never a reused pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Callable, TypeVar

T = TypeVar("T")

#: the agents' scripts, as their command lines name them at start (``ray/dashboard/agent.py``,
#: ``ray/_private/runtime_env/agent/main.py``), and the titles they then give themselves
AGENT_SCRIPTS = ("dashboard/agent.py", "runtime_env/agent/main.py")
AGENT_TITLES = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")
POLL_S = 0.2


def start_time(pid: int, proc: str = "/proc") -> int | None:
    """The process's start time (clock ticks since boot, field 22 of its stat), or None when it is
    gone or a zombie: a pid with another start time is another process."""
    try:
        with open(f"{proc}/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else int(fields[19])


def children(pid: int, proc: str = "/proc") -> list[int]:
    """The children of every thread of ``pid``."""
    kids: list[int] = []
    try:
        tids = os.listdir(f"{proc}/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"{proc}/{pid}/task/{tid}/children") as f:
                kids += [int(k) for k in f.read().split()]
        except OSError:
            continue
    return kids


def cmdline(pid: int, proc: str = "/proc") -> list[str]:
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            return [a for a in f.read().decode(errors="replace").split("\0") if a]
    except OSError:
        return []


def is_agent(argv: list[str]) -> bool:
    """Pure: a command line of one of Ray's node agents."""
    if argv and argv[0].strip() in AGENT_TITLES:
        return True
    return any(a.replace(os.sep, "/").endswith(script) for a in argv[:4] for script in AGENT_SCRIPTS)


def raylets_of(pid: int, proc: str = "/proc") -> set[int]:
    """The raylet processes among ``pid``'s children."""
    return {k for k in children(pid, proc) if os.path.basename((cmdline(k, proc) or [""])[0]) == "raylet"}


def guard(raylet: int, poll_s: float = POLL_S, proc: str = "/proc") -> list[int]:
    """Note ``raylet``'s agents while it lives; once it is gone, SIGKILL those still there (same
    start time). Returns the pids it signalled."""
    born = start_time(raylet, proc)
    agents: dict[int, int] = {}
    while born is not None and start_time(raylet, proc) == born:
        if len(agents) < len(AGENT_SCRIPTS):
            for k in children(raylet, proc):
                t = start_time(k, proc)
                if k not in agents and t is not None and is_agent(cmdline(k, proc)):
                    agents[k] = t
        time.sleep(poll_s)
    killed = []
    for pid, t in agents.items():
        if start_time(pid, proc) == t:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
    return killed


_guards: list[subprocess.Popen] = []


def start(raylet: int) -> subprocess.Popen:
    """Start the guard of ``raylet``: a child of this process that outlives it (by a poll)."""
    return subprocess.Popen(
        [sys.executable, "-I", "-S", os.path.abspath(__file__), str(raylet)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
    )


def guarded(start_cluster: Callable[[], T]) -> T:
    """Run ``start_cluster`` (a ``ray.init`` that starts a cluster in this process) and start a
    guard for each raylet it started."""
    before = raylets_of(os.getpid())
    out = start_cluster()
    for raylet in sorted(raylets_of(os.getpid()) - before):
        _guards.append(start(raylet))
    return out


def reap(timeout_s: float = 5.0) -> None:
    """After ``ray.shutdown()``: wait for the guards, whose raylets are gone, to exit."""
    while _guards:
        g = _guards.pop()
        try:
            g.wait(timeout_s)
        except subprocess.TimeoutExpired:  # its raylet outlived the shutdown: the guard stays on it
            pass


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C at the terminal is the trainer's to handle
    guard(int(sys.argv[1]))
