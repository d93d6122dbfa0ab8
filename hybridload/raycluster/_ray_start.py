"""What ``"auto"`` joins: ``RAY_ADDRESS``'s cluster, or the one this user started with ``ray
start`` here, never one a live ``ray.init()`` or test harness started (Ray's ``ray_current_cluster``
record alone is no proof: the GCS server's parent must be ``ray start`` or gone; Ray's own scan
for any raylet is not used; docs/guide/cluster.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from hybridload import _compat as compat, _environment as environment

RAY_CLI = "ray"  # the name of Ray's command-line tool


@dataclass(frozen=True)
class StartRecord:
    """Ray's record of the last ``ray start`` on this machine: its address and the file's owner."""

    address: str
    owner_uid: int
    path: str


def ray_start_record() -> StartRecord | None:
    """Read the address file that ``ray start`` writes (None when there is none)."""
    try:
        path = compat.ray_address_file()
    except Exception:  # Ray moved it: the same place, computed as Ray 2.x computes it
        path = os.path.join(environment.text("RAY_TMPDIR") or "/tmp", "ray", "ray_current_cluster")
    try:
        with open(path) as f:
            address = f.read().strip()
        uid = os.stat(path).st_uid
    except OSError:
        return None
    return StartRecord(address, uid, path) if address else None


def auto_address(env_address: str | None, record: StartRecord | None, uid: int) -> str | None:
    """Pure: the address ``"auto"`` joins — ``RAY_ADDRESS``, else the ``ray start`` record if
    this user (``uid``) owns it — or None (nothing to join)."""
    if env_address:
        return env_address
    if record is not None and record.owner_uid == uid:
        return record.address
    return None


def is_ray_start_command(cmdline: list[str]) -> bool:
    """Pure: ``[python] .../ray start ...``."""
    return "start" in cmdline[1:4] and any(os.path.basename(a) == RAY_CLI for a in cmdline[:2])


def gcs_started_by_another_process(address: str, proc: str = "/proc") -> bool:
    """True when the process listening on ``address``'s port here (the GCS server) has a live
    parent other than ``ray start`` (a ``ray.init()`` driver, a test's ``Cluster``); False when
    ``ray start`` started it, or nothing here listens on that port (a remote cluster)."""
    port = address.rpartition(":")[2]
    if not port.isdigit():
        return False
    pid = listening_pid(int(port), proc)
    if pid is None:
        return False
    parent = _ppid(proc, pid)
    return parent > 1 and not is_ray_start_command(_cmdline(proc, str(parent)))


def listening_pid(port: int, proc: str = "/proc") -> str | None:
    """The pid of the process with a TCP socket listening on ``port`` (from /proc/net/tcp*)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc, "net", table)) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rpartition(":")[2], 16) == port:
                inodes.add(f"socket:[{cols[9]}]")
    if not inodes:
        return None
    for pid in (p for p in _listdir(proc) if p.isdigit()):
        fd_dir = os.path.join(proc, pid, "fd")
        for fd in _listdir(fd_dir):
            try:
                if os.readlink(os.path.join(fd_dir, fd)) in inodes:
                    return pid
            except OSError:
                continue
    return None


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _cmdline(proc: str, pid: str) -> list[str]:
    try:
        with open(os.path.join(proc, pid, "cmdline"), "rb") as f:
            return [a for a in f.read().decode(errors="replace").split("\0") if a]
    except OSError:
        return []


def _ppid(proc: str, pid: str) -> int:
    try:
        with open(os.path.join(proc, pid, "stat")) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0
