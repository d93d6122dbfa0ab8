"""One embedded Ray cluster per machine for a multi-rank job, not a raylet and object store per
rank: the ranks meet in ``<tmp>/hybridload-<uid>/<hash of the job key>/address.json``, written
under an ``flock``; the key is torchrun's run id with ``MASTER_ADDR:MASTER_PORT``, which two live
jobs cannot share. A record whose rank is gone, or whose address is silent, is replaced."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import time
from typing import Callable, Mapping

from hybridload import _environment as environment

RECORD = "address.json"


def job_key(env: Mapping[str, str]) -> str | None:
    """Pure: the key that the ranks of one job on one machine share, or None (one process)."""
    ranks_here = environment.ranks_on_this_node(env)
    master = f"{environment.text('MASTER_ADDR', env) or ''}:{environment.text('MASTER_PORT', env) or ''}"
    if ranks_here <= 1 or master == ":":
        return None
    return f"{environment.text('TORCHELASTIC_RUN_ID', env) or ''}|{master}"


def job_dir(key: str) -> str:
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"hybridload-{os.getuid()}", digest)


@contextlib.contextmanager
def _locked(path: str, timeout_s: float):
    with open(path, "a") as f:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"another rank held {path} for {timeout_s:g} s while starting Ray; "
                        "remove the file if no rank of this job is running"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _alive(record: dict, listening: Callable[[str], None]) -> bool:
    try:
        os.kill(int(record["pid"]), 0)
        listening(record["address"])
    except (OSError, ConnectionError, KeyError, ValueError, TypeError):
        return False
    return True


def start_or_join(
    key: str,
    start: Callable[[], str],
    join: Callable[[str], None],
    listening: Callable[[str], None],
    timeout_s: float = 300.0,
) -> str:
    """Join the job's cluster on this machine if a live rank started one, else ``start()`` it
    (which returns its address) and record it. Returns "joined" or "started"."""
    d = job_dir(key)
    os.makedirs(d, mode=0o700, exist_ok=True)
    path = os.path.join(d, RECORD)
    with _locked(os.path.join(d, "lock"), timeout_s):
        try:
            with open(path) as f:
                record = json.load(f)
        except (OSError, ValueError):
            record = None
        if isinstance(record, dict) and _alive(record, listening):
            join(record["address"])
            return "joined"
        address = start()
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({"address": address, "pid": os.getpid()}, f)
        os.replace(tmp, path)
    atexit.register(_forget, path, os.getpid())
    return "started"


def _forget(path: str, pid: int) -> None:
    try:
        with open(path) as f:
            if json.load(f).get("pid") == pid:
                os.remove(path)
    except (OSError, ValueError):
        pass
