"""What the Ray cluster this process joined holds (its nodes, its free CPUs), for code outside the
Ray adapter that decides on it (a plan fitted here, a drop-in pass that would wait for CPUs)."""

from __future__ import annotations

import sys


def joined() -> tuple[frozenset[str], int] | None:
    """The alive nodes' ids and the cluster's CPUs when this process is connected already, else
    None; never imports Ray nor connects (a process that has not imported Ray has not joined)."""
    ray = _imported_ray()
    if ray is None or not ray.is_initialized():
        return None
    alive = frozenset(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
    return alive, int(ray.cluster_resources().get("CPU", 0))


def free_cpus(held: int = 0) -> float | None:
    """The CPUs the connected cluster has free, or None when this process is not connected.

    Args:
        held: CPUs of this process's actors starting or ready, taken off the cluster's total
            (Ray's free count lags them).
    """
    ray = _imported_ray()
    if ray is None or not ray.is_initialized():
        return None
    return min(ray.available_resources().get("CPU", 0), ray.cluster_resources().get("CPU", 0) - held)


def _imported_ray():
    """Ray's module if this process imported it, else None: a process that has not cannot have
    joined a cluster, and asking must not import it (seconds)."""
    return sys.modules["ray"] if "ray" in sys.modules else None
