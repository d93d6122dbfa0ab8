"""A Ray pool's actor that starts slowly, and a thread's way to kill one while it starts: the
start-failure tests and tools/stress/bench_start_kills.py share them."""

from __future__ import annotations

import time

from hybridload.lanes._ray.worker import PoolWorker


class SlowStart(PoolWorker):
    """A pool's actor whose start takes ``start_s`` more."""

    def __init__(self, start_s: float):
        super().__init__()
        time.sleep(start_s)


def named_actors() -> list[dict]:
    import ray

    return ray.util.list_named_actors(all_namespaces=True)


def kill_first_actor(prefix: str, old: set, timeout_s: float, out: dict) -> None:
    """``ray.kill`` the first actor named ``prefix...`` (not in ``old``) once the GCS lists it;
    note when (``out["t"]``, monotonic) and its name (``out["name"]``)."""
    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for a in named_actors():
            if a["name"].startswith(prefix) and a["name"] not in old:
                ray.kill(ray.get_actor(a["name"], namespace=a["namespace"]), no_restart=True)
                out.update(t=time.monotonic(), name=a["name"])
                return
        time.sleep(0.02)
