"""A worker process lost while it held a batch, as the caller should read it.

A batch is blamed for the workers it killed (a `WorkerLost` with ``batch_at_fault`` set, at
once, in torch's words: "DataLoader worker (pid N) is killed by signal: Segmentation fault.",
naming the worker, its node and each pid) only when its deaths say so (`blamed`):

- `CRASHES_TO_FAIL` (2) workers whose log shows a crash signal (Ray's ``*** SIGSEGV received``
  line: SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT). A crash in native code on the batch's
  samples crashes every worker it meets, and an unrelated crash that hits the same batch twice
  is rare; so two fail fast.
- `DEATHS_TO_FAIL` (4) deaths of any kind. A death with no crash signal (SIGKILL leaves no
  line: an outside kill, the OOM killer, Ray's memory monitor; or a worker on another node,
  whose log this machine cannot read) may be anyone's doing: two outside kills a second apart
  can hit the two actors that hold one batch (about 1 fault in 250 in a chaos soak; the
  evidence: docs/decisions/deaths-two-crashes-or-four-kills.md). Three such deaths are
  forgiven, so an unrelated kill or two never fails the job; the fourth ends it in a clear
  error rather than an endless loop for a batch that OOM-kills every worker. Four is
  also what the retry rules always reach first: with the default ``max_retries=3`` a batch
  whose worker was lost is handed on at least 3 + 1 times before its error is delivered, so
  the user reads this error, naming the pids, not a bare "no lane" one.

A pool may stop a batch at its first crash (``crashes_to_fail=1``: the drop-in DataLoader,
as torch's fails at its first dead worker).

Each death costs one worker start (seconds). A lost node, or an actor the pool stopped, is
not a process death: not counted, handed on like any lost batch.

Ray reports neither the signal nor the exit status (its death cause and the raylet's record
say "connection error code 2. End of file" for a segfault and a SIGKILL alike). So each actor
has Python's ``faulthandler`` write a fatal signal to a crash file of its own
(`crash_file`, beside its Ray log, on a descriptor of its own: user code that silences
stderr, as torch's ``test_segfault`` does, does not silence it), and Ray's ``*** SIGSEGV
received`` line in the worker's log is read too. Both are read where that worker ran on this
machine; elsewhere the message says where the log lives. Runs on Ray's callback thread: reads
files, never calls Ray."""

from __future__ import annotations

import glob
import os
import re
import signal
import threading
from collections.abc import Sequence

from hybridload import compat
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
    """Whether a batch's worker deaths, ``(pid, signal in its log or None)`` each, are the
    batch's doing: ``crashes_to_fail`` crash signals, or `DEATHS_TO_FAIL` deaths of any kind."""
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
    """The signal a worker of this machine's Ray node recorded before it died (``SIGSEGV``), or
    None: its crash file (`crash_file`) first, then Ray's line in its log."""
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

    def lost(self, key: tuple, seq: int, worker: int, exc: BaseException) -> WorkerLost:
        """The error for batch ``seq`` (``key``: the task's identity across passes) lost with
        ``worker`` (its index) through ``exc`` (Ray's)."""
        if not process_died(exc):
            return WorkerLost(f"actor {worker} of the {self.lane} lane died while it held batch {seq}")
        msg = str(exc)
        pid, ip = _field(msg, "pid"), _field(msg, "ip") or "?"
        sig = signal_in_log(pid)
        said = fate(pid, ip, sig)
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
    """Ray says the actor is gone (its process, its node, or a kill), whatever held it; not when
    it is only `actor_unavailable` (Ray's ``ActorUnavailableError`` is a ``RayActorError`` too)."""
    import ray

    return isinstance(exc, ray.exceptions.RayActorError) and not actor_unavailable(exc)


def actor_unavailable(exc: BaseException) -> bool:
    """Ray could not reach the actor for a moment (a broken connection, a restart): it may answer
    again, and if it is dead after all, its next call or probe says so."""
    import ray

    return isinstance(exc, ray.exceptions.ActorUnavailableError)


def unwrap(exc: BaseException) -> BaseException:
    """An error raised inside an actor arrives wrapped in RayTaskError; hand back the original
    when it is one of hybridload's own (a SampleError names the sample)."""
    from hybridload.errors import HybridLoadError

    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, HybridLoadError) else exc
