"""A worker process lost while it held a batch, as the caller should read it.

A batch whose worker *process* died (a crash in native code, ``os._exit``, the OOM killer) is
handed to another worker once: an unrelated crash, or an OOM kill on a busy node, costs time,
not the pass. A batch that killed `KILLS_TO_FAIL` workers is the batch's doing and would
kill every worker: it reaches the caller at once as a `WorkerLost`
with ``batch_at_fault`` set, in torch's words ("DataLoader worker (pid N) is killed by signal:
Segmentation fault."), naming the worker, its node and each pid. A lost node, or an actor the
pool stopped, is not the batch's doing: handed on as before.

Ray reports neither the signal nor the exit status; a worker on this machine wrote the signal
to its log (Ray's ``*** SIGSEGV received`` line), read here; elsewhere the message says where
that log lives. Runs on Ray's callback thread: reads a log file, never calls Ray."""

from __future__ import annotations

import glob
import os
import re
import signal
import threading

from hybridload import compat
from hybridload.errors import WorkerLost

KILLS_TO_FAIL = 2
_LOG_TAIL = 64 * 1024


def process_died(exc: BaseException) -> bool:
    """Ray says the actor's worker process died (not its node, not ``ray.kill``)."""
    msg = str(exc)
    return "worker process has died" in msg or "memory monitor" in msg or type(exc).__name__ == "OutOfMemoryError"


def _field(msg: str, name: str) -> str | None:
    found = re.search(rf"\b{name}: (\S+)", msg)
    return found.group(1) if found else None


def signal_in_log(pid: str | None) -> str | None:
    """The signal a worker of this machine's Ray node logged before it died (``SIGSEGV``), or None."""
    if pid is None:
        return None
    try:
        logs = compat.ray_node_logs_dir()  # the node's logs: no call to Ray
    except Exception:  # not connected, or another Ray layout
        return None
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


def fate(exc: BaseException) -> tuple[str, str]:
    """(``"DataLoader worker (pid N) is killed by signal: ..."``, the Ray node's address) of a dead worker."""
    msg = str(exc)
    pid, ip = _field(msg, "pid"), _field(msg, "ip") or "?"
    sig = signal_in_log(pid)
    if sig is not None and hasattr(signal, sig):
        how = f"is killed by signal: {signal.strsignal(getattr(signal, sig))}."
    else:  # Ray's text lists the usual causes (the OOM killer, a segfault) without saying which
        how = (
            f"exited unexpectedly (a crash, os._exit or the OOM killer: Ray does not say which; its log, "
            f"worker-*-{pid}.err in the Ray session's logs on {ip}, may)."
        )
    return f"DataLoader worker (pid {pid or '?'}) {how}", ip


class Deaths:
    """The worker processes each batch killed, over a pool's life."""

    def __init__(self, lane: str):
        self.lane = lane
        self._killed: dict[tuple, list[str]] = {}
        self._lock = threading.Lock()

    def lost(self, key: tuple, seq: int, worker: int, exc: BaseException) -> WorkerLost:
        """The error for batch ``seq`` (``key``: the task's identity across passes) lost with
        ``worker`` (its index) through ``exc`` (Ray's)."""
        if not process_died(exc):
            return WorkerLost(f"actor {worker} of the {self.lane} lane died while it held batch {seq}")
        said, ip = fate(exc)
        with self._lock:
            killed = self._killed.setdefault(key, [])
            pid = _field(str(exc), "pid") or f"? (worker {worker})"
            if pid not in killed:  # one death reaches each copy of the batch the worker held
                killed.append(pid)
            pids = list(killed)
        if len(pids) < KILLS_TO_FAIL:
            return WorkerLost(
                f"{said} It was worker {worker} of the {self.lane} lane (a Ray actor on {ip}), "
                f"running batch {seq}; the batch goes to another worker"
            )
        return WorkerLost(
            f"{said} It was worker {worker} of the {self.lane} lane (a Ray actor on {ip}); batch "
            f"{seq} killed {len(pids)} workers (pids {', '.join(pids)}), so it is not handed on: "
            "find what in its samples crashes the process (native code, memory)",
            batch_at_fault=True,
        )


def actor_died(exc: BaseException) -> bool:
    """Ray says the actor is gone (its process, its node, or a kill), whatever held it."""
    import ray

    return isinstance(exc, (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError))


def unwrap(exc: BaseException) -> BaseException:
    """An error raised inside an actor arrives wrapped in RayTaskError; hand back the original
    when it is one of hybridload's own (a SampleError names the sample)."""
    from hybridload.errors import HybridLoadError

    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, HybridLoadError) else exc
