"""Connecting to Ray: an existing cluster, or an embedded one on loopback.

Ray is imported here lazily (never at ``import hybridload``). ``acquire`` connects
(or starts) and counts users; ``release`` shuts Ray down when the last user that
hybridload connected for is gone. A Ray session the user started is left alone.

Trust model: whoever can reach a Ray cluster's ports can run code on it. The embedded
cluster listens on 127.0.0.1 only; for remote clusters use a private network and Ray's
token authentication (RAY_AUTH_MODE=token).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

from .errors import LaneUnavailableError

log = logging.getLogger(__name__)

_lock = threading.Lock()
_users = 0
_we_connected = False


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise LaneUnavailableError(
            "the Ray lane needs Ray: pip install 'hybridload[ray]' (or use LoaderPolicy(cpu_actors=0) "
            "for the in-process lane)") from exc
    return ray


def acquire(address: str | None = None, fallback_embedded: bool = False):
    """Make sure this process is connected to Ray; returns the ``ray`` module.

    ``address``: "embedded" → an embedded local cluster on loopback (RAY_ADDRESS is not
    read); None → RAY_ADDRESS if set, else the embedded cluster; "auto" → the cluster
    started on this machine with ``ray start`` (with ``fallback_embedded``, the embedded
    cluster when there is none); "host:port" → that cluster. A connection that already
    exists in this process is used as it is.
    """
    global _users, _we_connected
    ray = _import_ray()
    with _lock:
        if not ray.is_initialized():
            addr = None if address == "embedded" else (address or os.environ.get("RAY_ADDRESS"))
            if addr == "auto" and os.environ.get("RAY_ADDRESS"):
                addr = os.environ["RAY_ADDRESS"]
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            if addr:
                log.info("connecting to the Ray cluster at %s", addr)
                try:
                    ray.init(address=addr, logging_level=logging.WARNING, log_to_driver=False)
                except ConnectionError:
                    if not (addr == "auto" and fallback_embedded):
                        raise
                    log.info("no running Ray cluster found; starting an embedded one")
                    addr = None
            if not addr:
                _loopback_only(ray)
                logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
                log.info("starting an embedded Ray cluster on 127.0.0.1")
                ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1",
                         logging_level=logging.WARNING, log_to_driver=False,
                         object_store_memory=_embedded_store_bytes())
            _we_connected = True
        _users += 1
    return ray


def _loopback_only(ray) -> None:
    """Make the embedded cluster bind to 127.0.0.1 only.

    Ray decides its node address from RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER, read once when
    ``ray`` is imported (ray._private.ray_constants.ENABLE_RAY_CLUSTER); with the default,
    its processes listen on every interface. The variable is set for the processes Ray
    starts, and the constant is corrected when ``ray`` was imported before us.
    """
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        from ray._private import ray_constants
        ray_constants.ENABLE_RAY_CLUSTER = False
    except Exception as exc:  # pragma: no cover - Ray moved its constant: fail loudly, never silently
        raise RuntimeError(f"cannot confine the embedded Ray cluster to loopback ({exc}); start Ray yourself "
                           "and pass LoaderPolicy(ray_address=...)") from exc


def _embedded_store_bytes() -> int:
    # a modest object store: batches are consumed as they arrive (the window bounds them)
    return int(os.environ.get("HYBRIDLOAD_OBJECT_STORE_BYTES", str(1 << 30)))


def release() -> None:
    """Drop one user; shut Ray down if hybridload connected it and nobody uses it now."""
    global _users, _we_connected
    ray = _import_ray()
    with _lock:
        _users = max(0, _users - 1)
        if _users == 0 and _we_connected and ray.is_initialized():
            log.info("shutting down the Ray connection hybridload made")
            ray.shutdown()
            _we_connected = False


@dataclass(frozen=True)
class NodeInfo:
    """One alive Ray node as the placement planner sees it."""

    node_id: str
    address: str
    cpus: int
    is_trainer: bool


def nodes() -> list[NodeInfo]:
    """Alive nodes with their total CPUs; the node this process runs on is the trainer's."""
    ray = _import_ray()
    here = ray.get_runtime_context().get_node_id()
    out = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        out.append(NodeInfo(n["NodeID"], n.get("NodeManagerAddress", "?"),
                            int(n.get("Resources", {}).get("CPU", 0)), n["NodeID"] == here))
    return sorted(out, key=lambda n: (n.is_trainer, n.node_id))
