"""What the soak runs in: a small photo set on disk and on a moto S3 server on 127.0.0.1, a
simulated Ray cluster on loopback, and what /proc says about the processes they start."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read by Ray at import: loopback only
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

log = logging.getLogger("soak")
CREDS = {"key": "test", "secret": "test"}
STORE = 120 * 2**20
#: Ray's setting of its worker processes' niceness (added to the raylet's); Ray's default is 15
NICENESS = "RAY_worker_niceness"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_photos(root: Path, n: int) -> tuple[list[Path], list[int]]:
    """``n`` small JPEGs (80x60 crops of the demo's photos, re-encoded) under ``root``: (paths, labels)."""
    from PIL import Image

    from hybridload.cli.demo_data import make_photo_folder

    big = make_photo_folder(root / "full", n, num_classes=3)
    out = root / "tiny"
    out.mkdir(exist_ok=True)
    paths, labels = [], []
    for k, src in enumerate(sorted(big.glob("class_*/*.jpg"))):
        dst = out / f"{k:04d}.jpg"
        if not dst.exists():
            Image.open(src).convert("RGB").resize((80, 60)).save(dst, "JPEG", quality=90)
        paths.append(dst)
        labels.append(int(src.parent.name.split("_")[1]))
    return paths, labels


class S3Server:
    """A moto S3 server in its own process on 127.0.0.1 holding the photos in bucket ``photos``."""

    def __init__(self, files: list[Path]):
        import s3fs

        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise RuntimeError(f"moto server did not listen on 127.0.0.1:{self.port} within 60 s")
                time.sleep(0.1)
        # the clients' own retries off: the source's ReadRetry does the retrying
        self.options = {
            "endpoint_url": f"http://127.0.0.1:{self.port}",
            **CREDS,
            "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2, "read_timeout": 4},
        }
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **self.options)
        fs.mkdir("photos")
        for p in files:
            fs.pipe(f"photos/{p.name}", p.read_bytes())
        self.urls = [f"s3://photos/{p.name}" for p in files]

    def stop_for(self, seconds: float) -> None:
        """The server stopped (SIGSTOP: it answers nothing, connections hang) then continued."""
        self.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.proc.kill()
        self.proc.wait(timeout=30)


def worker_niceness(env: dict[str, str], ray_default: bool) -> str | None:
    """The ``RAY_worker_niceness`` the soak's cluster starts with (None: unset, Ray's 15). As the
    embedded cluster hybridload starts (`hybridload.raycluster._connect`), whose job the soak
    models: 0, the trainer's priority, unless the environment sets it; ``ray_default`` (the
    soak's ``--ray-default-niceness``): Ray's own default, as a cluster started by `ray start`."""
    if ray_default:
        return None
    return env.get(NICENESS, "0")


class NodeStartFailed(RuntimeError):
    """Ray gave up on a worker node's start (a raylet not registered within Ray's 30 s on a loaded machine)."""


class RayCluster:
    """A head (1 CPU) and ``workers`` nodes of 1 CPU on 127.0.0.1 (``ray.cluster_utils.Cluster``),
    their worker processes at ``niceness`` (`worker_niceness`; None: Ray's default). Ray's
    processes take this process's environment, so the setting is made there before the head
    starts and holds for the nodes added later."""

    def __init__(self, workers: int = 2, niceness: str | None = "0"):
        from ray.cluster_utils import Cluster

        if niceness is None:
            os.environ.pop(NICENESS, None)
        else:
            os.environ[NICENESS] = niceness

        self.cluster = Cluster(
            initialize_head=True,
            connect=False,
            head_node_args=dict(
                num_cpus=1, include_dashboard=False, node_ip_address="127.0.0.1", object_store_memory=STORE
            ),
        )
        self.workers: list = []
        for _ in range(workers):
            self.add()
        self.cluster.wait_for_nodes(timeout=60)
        self.address = self.cluster.address

    def add(self):
        """A worker node more; `NodeStartFailed` when Ray gave up on its start (what the start
        left running is ended: Ray's processes this process started for it)."""
        before = set(direct_children(os.getpid()))
        try:
            node = self.cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1", object_store_memory=STORE)
        except Exception as e:  # Ray raises a bare Exception when a raylet does not register within 30 s
            for pid in set(direct_children(os.getpid())) - before:
                if "ray" in cmdline(pid):
                    end_leftover(pid)
            raise NodeStartFailed(f"a Ray worker node did not start: {e}") from e
        self.workers.append(node)
        return node

    def remove(self, k: int) -> None:
        self.cluster.remove_node(self.workers.pop(k), allow_graceful=False)

    def raylet_pids(self) -> list[int]:
        nodes = [self.cluster.head_node, *self.workers]
        return [p.process.pid for n in nodes if n is not None for p in n.all_processes.get("raylet", [])]

    def actors_alive(self) -> list[str]:
        """hybridload's actors the cluster's GCS holds alive (this process connects to ask)."""
        import ray

        ray.init(address=self.address, logging_level=logging.WARNING, log_to_driver=False)
        try:
            return [
                a["name"]
                for a in ray.util.list_named_actors(all_namespaces=True)
                if a["name"].startswith("hybridload-")
            ]
        finally:
            ray.shutdown()

    def logs(self) -> Path:
        """The cluster's log folder (every node of a ``cluster_utils`` cluster writes to the head's session)."""
        return Path(self.cluster.head_node.get_session_dir_path()) / "logs"

    def actor_starts(self) -> list[dict]:
        """Every hybridload actor's start as Ray recorded it (`actor_starts_from`; this process
        connects to ask): read before `close`, while the GCS holds its actor table and task events."""
        import ray
        from ray._private import state

        ray.init(address=self.address, logging_level=logging.WARNING, log_to_driver=False)
        try:
            return actor_starts_from(state.actors(), state.state._get_all_task_events(), self.logs())
        finally:
            ray.shutdown()

    def close(self) -> None:
        self.cluster.shutdown()


def actor_starts_from(actors: dict, task_events: list, logs: Path) -> list[dict]:
    """Each hybridload actor's start in Ray's own timings, wall-clock seconds (None: not reached):
    ``asked`` its creation task registered (the pool asked for it), ``worker`` its worker
    process's core worker up (the first line of its ``python-core-worker-*_<pid>.log``: Python
    and Ray imported), ``running`` the creation task on that worker (Ray leased it the worker),
    ``created`` that task finished (the actor class's module imported, ``__init__`` run),
    ``ready`` its first ``ready()`` answered (what the pool awaits), ``died`` its end; with its
    ``name`` and worker ``pid``. From ``ray._private.state``'s actor table and task events (Ray's
    GCS holds them without a dashboard)."""
    from ray.core.generated import common_pb2

    creation = common_pb2.TaskType.Value("ACTOR_CREATION_TASK")
    registered, running, finished = (
        common_pb2.TaskStatus.Value(n) for n in ("PENDING_ARGS_AVAIL", "RUNNING", "FINISHED")
    )
    starts: dict[str, dict] = {}
    for actor_id, a in actors.items():
        if a["Name"].startswith("hybridload-"):
            end = a.get("EndTime") or 0
            starts[actor_id] = {"name": a["Name"], "pid": a["Pid"] or None, "died": end / 1e3 if end else None}
    ready: dict[str, float] = {}
    for e in task_events:
        info, ts = e.task_info, e.state_updates.state_ts_ns
        actor_id = info.actor_id.hex()
        if actor_id not in starts:
            continue
        if info.type == creation:
            start = starts[actor_id]
            for key, status in (("asked", registered), ("running", running), ("created", finished)):
                if status in ts:
                    start[key] = ts[status] / 1e9
        elif info.name.endswith(".ready") and finished in ts:
            ready[actor_id] = min(ready.get(actor_id, float("inf")), ts[finished] / 1e9)
    for actor_id, start in starts.items():
        start["ready"] = ready.get(actor_id)
        start["worker"] = _core_worker_up(logs, start["pid"]) if start["pid"] else None
        for key in ("asked", "running", "created"):
            start.setdefault(key, None)
    return list(starts.values())


def owner_pid(logs: Path, pid: int) -> int | None:
    """The pid of the driver (a trainer) whose job Ray worker ``pid`` ran for, from the names of
    Ray's log files: the worker's ``worker-<id>-<job>-<pid>.out`` names its job, the driver's
    ``python-core-driver-<job>..._<pid>.log`` that job's driver. None when they do not say (a
    worker never given a job is ``ffffffff``)."""
    for out in logs.glob(f"worker-*-{pid}.out"):
        job = out.name.rsplit("-", 2)[-2]
        if job == "ffffffff":
            continue
        for driver in logs.glob(f"python-core-driver-{job}*_*.log"):
            tail = driver.stem.rsplit("_", 1)[-1]
            if tail.isdigit():
                return int(tail)
    return None


def _core_worker_up(logs: Path, pid: int) -> float | None:
    """When worker ``pid``'s core worker logged its first line (local time, as Ray writes it)."""
    from datetime import datetime

    for path in logs.glob(f"python-core-worker-*_{pid}.log"):
        try:
            with open(path) as f:
                first = f.readline()
            return datetime.strptime(first[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except (OSError, ValueError):
            return None
    return None


# ------------------------------------------------------------------ /proc


def children_of(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (read from /proc, no psutil here)."""
    parent: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parent.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        kids = parent.get(todo.pop(), [])
        out.extend(kids)
        todo.extend(kids)
    return out


def direct_children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d))
            except (OSError, IndexError, ValueError):
                continue
    return out


def cmdline(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks (a pid reused later has another)."""
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def shm_segments(pid: int) -> set[str]:
    """The /dev/shm files ``pid`` has mapped."""
    try:
        return {line.split()[-1] for line in open(f"/proc/{pid}/maps") if "/dev/shm/" in line}
    except OSError:
        return set()


def kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


def end_leftover(pid: int, timeout: float = 10.0) -> None:
    """SIGKILL what a failed Ray start left running, and reap it when it is this process's child
    (Ray's own handle on it is gone with the failed start): unreaped, it stays a zombie, which
    the leak check reads as a process still alive."""
    kill(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not ours (a grandchild: its parent's end hands it to init), or reaped
            return
        if done:
            return
        time.sleep(0.05)
