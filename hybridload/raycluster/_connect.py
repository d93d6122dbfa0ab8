"""One Ray connection per process, shared by every loader and counted (``acquire``/``release``),
so a second loader pays no Ray start nor its per-``ray.init`` leak of descriptors and memory;
Ray is imported here lazily (the addresses and the trust model: docs/guide/cluster.md)."""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass

from hybridload import _compat as compat, _environment as environment
from hybridload.raycluster import _agent_guard as agent_guard
from hybridload.raycluster import _gcs_probe as gcs_probe
from hybridload.raycluster import _last_out as last_out
from hybridload.raycluster import _node_cluster as node_cluster
from hybridload.raycluster import _ray_start as ray_start
from hybridload.errors import LaneUnavailableError
from hybridload._extras import install_hint

log = logging.getLogger(__name__)

_lock = threading.Lock()
_users = 0
_ours: str | None = None  # what hybridload connected to ("embedded" or an address); None: not ours
_our_job: str | None = None  # the Ray job id of that connection (a later ray.init by the user is not ours)


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise LaneUnavailableError(
            f"the Ray lane needs Ray: {install_hint('ray')} (or use LoaderPolicy(cpu_actors=0) for the in-process lane)"
        ) from exc
    return ray


def acquire(address: str | None = None, fallback_embedded: bool = False):
    """Make sure this process is connected to Ray; returns the ``ray`` module.

    A connection that already exists in this process is used as it is (a session the user
    started is never shut down here); an idle one hybridload made for another target is replaced.

    Args:
        address: "embedded" (Ray on loopback; RAY_ADDRESS not read), None (RAY_ADDRESS if set,
            else embedded), "auto" (`hybridload.raycluster._ray_start`) or "host:port".
        fallback_embedded: with "auto", start the embedded cluster when none is found.
    """
    global _users, _ours, _our_job
    ray = _import_ray()
    with _lock:
        # "auto" was resolved when the live connection was made: resolved again, it finds the embedded
        # cluster's own address (Ray records it) and replaced it under the ranks that joined it
        target = (
            _ours if address == "auto" and _ours is not None and _is_ours(ray) else _target(address, fallback_embedded)
        )
        if _is_ours(ray) and _users == 0 and target != _ours:
            log.info("replacing the idle Ray connection to %s with one to %s", _ours, target)
            ray.shutdown()
        if not ray.is_initialized():
            _ours = _connect(ray, target, joined_auto=address == "auto", fallback_embedded=fallback_embedded)
            _our_job = ray.get_runtime_context().get_job_id()
        _users += 1
    return ray


def _is_ours(ray) -> bool:
    """True while the live connection is the one hybridload made."""
    return _ours is not None and ray.is_initialized() and ray.get_runtime_context().get_job_id() == _our_job


def _target(address: str | None, fallback_embedded: bool) -> str:
    if address == "embedded":
        return "embedded"
    if address == "auto":
        env = environment.text("RAY_ADDRESS")
        found = ray_start.auto_address(env, ray_start.ray_start_record(), os.getuid())
        if found and not env and ray_start.gcs_started_by_another_process(found):
            log.warning(
                "the cluster at %s in Ray's `ray start` record was started by another process (ray.init() "
                "or a test's Cluster), not `ray start`: not joining it",
                found,
            )
            found = None
        if found is None and not fallback_embedded:
            raise ConnectionError(
                "ray_address='auto': RAY_ADDRESS is unset and no cluster was started with `ray start` on this "
                "machine by this user; start one (`ray start --head`), or pass ray_address='host:port' or "
                "'embedded'"
            )
        return found or "embedded"
    return address or environment.text("RAY_ADDRESS") or "embedded"


def _connect(ray, target: str, *, joined_auto: bool, fallback_embedded: bool) -> str:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if target != "embedded":
        log.info("connecting to the Ray cluster at %s", target)
        try:
            _check_listening(target)  # ray.init waits minutes on a dead address (a stale record)
            if joined_auto and not environment.text("RAY_ADDRESS"):  # found on this machine: Ray's token, as Ray's auto
                _join(ray, target)
            else:
                gcs_probe.require_gcs(target, gcs_probe.join_timeout_s())  # a wrong token: seconds, named
                ray.init(address=target, logging_level=logging.WARNING, log_to_driver=False)
        except ConnectionError as exc:
            if not (joined_auto and fallback_embedded):
                raise
            log.warning("no Ray cluster answers at %s (%s); starting an embedded one on 127.0.0.1", target, exc)
            target = "embedded"
        else:
            if joined_auto and _started_by_ray_init(ray):
                ray.shutdown()
                if not fallback_embedded:
                    raise ConnectionError(
                        f"ray_address='auto': the cluster at {target} was started by another "
                        "process's ray.init(), not `ray start`; pass its address explicitly"
                    )
                log.warning(
                    "the cluster at %s was started by ray.init() in another process, not `ray start`: "
                    "not joining it; starting an embedded one on 127.0.0.1",
                    target,
                )
                target = "embedded"
    if target == "embedded":
        key = node_cluster.job_key(os.environ)
        if key is None:
            _start_embedded(ray)
        else:  # ranks of one job on this machine share one embedded cluster
            how = node_cluster.start_or_join(
                key, lambda: _start_embedded(ray), lambda addr: _join(ray, addr), _check_listening
            )
            log.info("%s this job's embedded Ray cluster on this machine", how)
            if how == "started":  # it lives in this process: leave after the ranks that joined it
                last_out.stay_until_joined_ranks_leave(ray)
    return target


def _start_embedded(ray) -> str:
    _loopback_only(ray)
    # its actors do what torch's worker processes do, at the trainer's priority (Ray's nice 15
    # starved their starts for 21-73 s beside other work: docs/decisions/pool-recovery-after-actor-kills.md)
    os.environ.setdefault(environment.RAY_WORKER_NICENESS, "0")  # Ray adds it to the raylet's: the trainer's
    # the token banner is noise for a loopback-only cluster this process owns (token auth stays on)
    logging.getLogger(compat.RAY_TOKEN_LOGGER).setLevel(logging.ERROR)
    log.info("starting an embedded Ray cluster on 127.0.0.1")
    agent_guard.guarded(  # Ray 2.60 starts the node agents regardless: they end with the raylet
        lambda: ray.init(
            address="local",
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            logging_level=logging.WARNING,
            log_to_driver=False,
            object_store_memory=environment.object_store_bytes(),  # modest: the window bounds the batches held
        )
    )
    return ray.get_runtime_context().gcs_address


def _join(ray, address: str) -> None:
    """Connect to a cluster found on this machine (Ray's token, if it has one, as Ray's "auto" does)."""
    try:
        compat.ray_enable_token_auth()
    except Exception as exc:  # a Ray without token authentication
        log.debug("no Ray token set-up (%s)", exc)
    # ray.init retries a GCS that does not answer for many minutes, deaf to SIGTERM: ask first, bounded
    gcs_probe.require_gcs(address, gcs_probe.join_timeout_s())
    if _is_loopback(address):  # an embedded cluster: it listens on 127.0.0.1 only
        with compat.ray_localhost_kept():
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False, _node_ip_address="127.0.0.1")
    else:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)


def _is_loopback(address: str) -> bool:
    return address.rpartition(":")[0].strip("[]") in ("127.0.0.1", "localhost", "::1")


def _check_listening(address: str, timeout_s: float = 5.0) -> None:
    """ConnectionError unless something accepts TCP connections at ``host:port``."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return  # not host:port (e.g. ray://...): Ray reports it
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConnectionError(f"nothing listens at {address} ({exc}); is the Ray cluster running?") from None


def _started_by_ray_init(ray) -> bool:
    """Ray's own cluster metadata says whether ``ray.init()`` (not ``ray start``) made it."""
    try:
        meta = compat.ray_cluster_metadata()
        return bool(meta and meta.get("ray_init_cluster"))
    except Exception as exc:  # an older/newer Ray without the record: the address file was the test
        log.debug("cannot read Ray's cluster metadata (%s)", exc)
        return False


def _loopback_only(ray) -> None:
    """Make the embedded cluster bind to 127.0.0.1 only: Ray reads its variable once, at import,
    so the constant is corrected too when ``ray`` was imported before us."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        compat.ray_disable_cluster_mode()
    except Exception as exc:  # pragma: no cover - Ray moved its constant: fail loudly, never silently
        raise RuntimeError(
            f"cannot confine the embedded Ray cluster to loopback ({exc}); start Ray yourself "
            "and pass LoaderPolicy(ray_address=...)"
        ) from exc


def release() -> None:
    """Drop one user. The connection stays for the next loader (see `shutdown`)."""
    global _users
    with _lock:
        _users = max(0, _users - 1)


def users() -> int:
    """Loaders (and other hybridload parts) holding the connection now."""
    with _lock:
        return _users


def shutdown() -> bool:
    """Shut down the Ray connection hybridload made (and its embedded cluster) if no loader
    uses it; returns True when it did. Ray also shuts it down at interpreter exit."""
    global _ours
    ray = _import_ray()
    with _lock:
        if _users or not _is_ours(ray):
            return False
        log.info("shutting down the Ray connection hybridload made (%s)", _ours)
        ray.shutdown()
        agent_guard.reap()
        _ours = None
        return True


@dataclass(frozen=True)
class NodeInfo:
    """One alive Ray node as the placement planner sees it.

    Attributes:
        node_id: Ray's node id.
        address: the node's IP address.
        cpus: its CPUs.
        is_trainer: whether the training process runs there.
    """

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
        out.append(
            NodeInfo(
                n["NodeID"],
                n.get("NodeManagerAddress", "?"),
                int(n.get("Resources", {}).get("CPU", 0)),
                n["NodeID"] == here,
            )
        )
    return sorted(out, key=lambda n: (n.is_trainer, n.node_id))
