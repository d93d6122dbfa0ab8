"""Whether a Ray cluster's GCS answers at an address within a deadline, asked from a daemon
thread: ``ray.init`` retries a silent GCS for minutes in C++, where no signal handler runs
(docs/guide/cluster.md). The thread's client has the same deadline, so it ends on its own: one
left retrying disturbed this process's live connection."""

from __future__ import annotations

import os
import threading

from hybridload import _compat as compat
from hybridload._environment import seconds_setting

JOIN_TIMEOUT_ENV = "HYBRIDLOAD_RAY_JOIN_TIMEOUT_S"
DEFAULT_JOIN_TIMEOUT_S = 20.0


def join_timeout_s(env=os.environ) -> float:
    """Pure: the seconds a join waits for the GCS (``HYBRIDLOAD_RAY_JOIN_TIMEOUT_S``, default 20)."""
    return seconds_setting(None, JOIN_TIMEOUT_ENV, DEFAULT_JOIN_TIMEOUT_S, env=env)


def require_gcs(address: str, timeout_s: float) -> None:
    """Return once the GCS at ``address`` gives its cluster id; ConnectionError (one line, naming
    the address) when it refuses or has not answered within ``timeout_s`` seconds. A Ray client
    address (``ray://...``) is not a GCS: Ray reports on it."""
    if "://" in address:
        return
    outcome: dict = {}

    def ask():
        try:
            compat.ray_gcs_client_probe(address, int(timeout_s * 1000))  # raises unless it answers
            outcome["answered"] = True
        except Exception as exc:  # Ray's own error: reported below with the address
            outcome["error"] = exc

    asker = threading.Thread(target=ask, name=f"hybridload-gcs-probe-{address}", daemon=True)
    asker.start()
    asker.join(timeout_s)
    if "answered" in outcome:
        return
    if "error" in outcome:
        error = outcome["error"]
        first = (str(error).strip().splitlines() or [""])[0]
        raise ConnectionError(
            f"the Ray cluster at {address} refused this process ({type(error).__name__}: {first[:200]})"
        )
    raise ConnectionError(
        f"no Ray GCS answered at {address} within {timeout_s:g} s (something listens there, but not a Ray "
        f"cluster this process can reach); check the address, or set {JOIN_TIMEOUT_ENV} for a slow cluster"
    )
