"""A worker process lost while it held a batch, as the caller should read it: the batch is blamed
(`WorkerLost` with ``batch_at_fault``, in torch's words) only after `CRASHES_TO_FAIL` crash signals
or `DEATHS_TO_FAIL` deaths of any kind (why these counts:
docs/decisions/deaths-two-crashes-or-four-kills.md). Ray reports neither signal nor exit status, so
the signal is read from the worker's crash file and Ray log on this machine. Runs on Ray's callback
thread: reads files, never calls Ray."""

from __future__ import annotations

import glob
import os
import re
import signal
import threading
from collections.abc import Sequence

from hybridload import _compat as compat
from hybridload.errors import WorkerLost

CRASH_SIGNALS = frozenset({"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT"})
CRASHES_TO_FAIL = 2
DEATHS_TO_FAIL = 4
_LOG_TAIL = 64 * 1024


#: what faulthandler writes for each crash signal ("Fatal Python error: Segmentation fault")
FAULTHANDLER_NAMES = {
    "Segmentation fault": "SIGSEGV",
    "Bus error": "SIGBUS",
    "Illegal instruction": "SIGILL",
    "Floating-point exception": "SIGFPE",
    "Aborted": "SIGABRT",
}


def blamed(deaths: Sequence[tuple[str, str | None]], crashes_to_fail: int = CRASHES_TO_FAIL) -> bool:
    """Whether a batch's deaths, ``(pid, signal or None)`` each, are its doing: ``crashes_to_fail``
    crash signals or `DEATHS_TO_FAIL` deaths."""
    crashes = sum(1 for _, sig in deaths if sig in CRASH_SIGNALS)
    return crashes >= crashes_to_fail or len(deaths) >= DEATHS_TO_FAIL


def crash_file(logs_dir: str, pid: int | str) -> str:
    """Where worker ``pid`` of the Ray node logging to ``logs_dir`` has faulthandler write a crash."""
    return os.path.join(logs_dir, f"hybridload-crash-{pid}.log")


def process_died(exc: BaseException) -> bool:
    """Ray says the actor's worker process died (not its node, not ``ray.kill``)."""
    msg = str(exc)
    return "worker process has died" in msg or "memory monitor" in msg or type(exc).__name__ == "OutOfMemoryError"


def _field(msg: str, name: str) -> str | None:
    found = re.search(rf"\b{name}[:=] ?([^\s,)]+)", msg, re.IGNORECASE)  # "pid: 7" (a death), "pid=7" (the OOM text)
    return found.group(1) if found else None


def signal_in_log(pid: str | None) -> str | None:
    """The signal a worker of this machine's Ray node recorded before it died, from its crash file,
    then Ray's line in its log; else None."""
    if pid is None:
        return None
    try:
        logs = compat.ray_node_logs_dir()  # the node's logs: no call to Ray
    except Exception:  # not connected, or another Ray layout
        return None
    try:
        with open(crash_file(logs, pid), "rb") as f:  # faulthandler's line, on a descriptor the user cannot silence
            said = re.search(r"Fatal Python error: ([A-Za-z -]+)", f.read(_LOG_TAIL).decode(errors="replace"))
        if said and said.group(1).strip() in FAULTHANDLER_NAMES:
            return FAULTHANDLER_NAMES[said.group(1).strip()]
    except OSError:  # none: another node, or a worker that is no PoolWorker
        pass
    for path in glob.glob(os.path.join(logs, f"worker-*-{pid}.err")):
        try:
            with open(path, "rb") as f:
                f.seek(max(0, os.path.getsize(path) - _LOG_TAIL))
                text = f.read().decode(errors="replace")
        except OSError:
            continue
        found = re.findall(r"\*\*\* (SIG[A-Z]+) received", text)
        if found:
            return found[-1]
    return None


def fate(pid: str | None, ip: str, sig: str | None) -> str:
    """``"DataLoader worker (pid N) is killed by signal: ..."``: what became of a dead worker."""
    if sig is not None and hasattr(signal, sig):
        how = f"is killed by signal: {signal.strsignal(getattr(signal, sig))}."
    else:  # Ray's text lists the usual causes (the OOM killer, a segfault) without saying which
        how = (
            f"exited unexpectedly (SIGKILL, the OOM killer, a crash or os._exit: Ray does not say which; its "
            f"log, worker-*-{pid}.err in the Ray session's logs on {ip}, may)."
        )
    return f"DataLoader worker (pid {pid or '?'}) {how}"


class Deaths:
    """The worker processes each batch killed, over a pool's life."""

    def __init__(self, lane: str, crashes_to_fail: int = CRASHES_TO_FAIL):
        self.lane, self.crashes_to_fail = lane, crashes_to_fail
        self._killed: dict[tuple, dict[str, str | None]] = {}
        self._lock = threading.Lock()

    def lost(self, key: tuple, seq: int, worker: int, exc: BaseException, ran: bool = True) -> WorkerLost:
        """The error for batch ``seq`` (``key``: its identity across passes) lost with worker
        ``worker`` through Ray's ``exc``; a batch the worker held queued (not ``ran``) is not
        counted against."""
        if not process_died(exc):
            return WorkerLost(f"actor {worker} of the {self.lane} lane died while it held batch {seq}")
        msg = str(exc)
        pid, ip = _field(msg, "pid"), _field(msg, "ip") or "?"
        sig = signal_in_log(pid)
        said = fate(pid, ip, sig)
        if not ran:
            return WorkerLost(
                f"{said} It was worker {worker} of the {self.lane} lane (a Ray actor on {ip}), with batch {seq} "
                "queued behind the batch it ran; the batch goes to another worker (not counted against it)"
            )
        with self._lock:
            killed = self._killed.setdefault(key, {})
            name = pid or f"? (worker {worker}, death {len(killed) + 1})"
            if killed.get(name) is None:  # one death reaches each copy of the batch the worker held
                killed[name] = sig
            deaths = list(killed.items())
        where = f"It was worker {worker} of the {self.lane} lane (a Ray actor on {ip})"
        if not blamed(deaths, self.crashes_to_fail):
            return WorkerLost(
                f"{said} {where}, running batch {seq}; the batch goes to another worker (its death {len(deaths)}: "
                f"a batch is stopped at {self.crashes_to_fail} crash(es) or {DEATHS_TO_FAIL} deaths)"
            )
        crashes = sorted({s for _, s in deaths if s in CRASH_SIGNALS})
        n = sum(1 for _, s in deaths if s in CRASH_SIGNALS)
        how = (
            f"{n} of them by a crash signal ({', '.join(crashes)})"
            if n
            else "none by a crash signal in its log (SIGKILL, the OOM killer, or a log on another node)"
        )
        return WorkerLost(
            f"{said} {where}; batch {seq} killed {len(deaths)} workers (pids {', '.join(p for p, _ in deaths)}), "
            f"{how}, so it is not handed on: find what in its samples crashes the process (native code) or "
            "fills its memory",
            batch_at_fault=True,
        )


def actor_died(exc: BaseException) -> bool:
    """Ray says the actor is gone (process, node or kill), not merely unreachable
    (``ActorUnavailableError`` is a ``RayActorError`` too)."""
    import ray

    return isinstance(exc, ray.exceptions.RayActorError) and not actor_unavailable(exc)


def actor_unavailable(exc: BaseException) -> bool:
    """Ray could not reach the actor for a moment: it may answer again; if dead, its next call or
    probe says so."""
    import ray

    return isinstance(exc, ray.exceptions.ActorUnavailableError)


def unwrap(exc: BaseException) -> BaseException:
    """The original of a hybridload error wrapped in RayTaskError (a SampleError names the sample),
    else ``exc``."""
    from hybridload.errors import HybridLoadError

    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, HybridLoadError) else exc
