"""Real hosts on one machine: named network namespaces joined by a veth pair, with Ray started
in them by ``ray start`` and token authentication, as the README tells users.

Host "a" (192.0.2.1) runs the Ray head and the trainer; host "b" (192.0.2.2) is a worker
host. Every packet between them crosses the veth link; nothing can leave for another network
(the addresses are from the documentation range, TEST-NET-1, and no route leads out).
Each host's Ray keeps its files under a directory of its own (``RAY_TMPDIR``), so nothing
here is seen by a ``ray_address="auto"`` elsewhere on the machine, and the token is passed in
the environment (``RAY_AUTH_TOKEN``), never written to ``~/.ray``.

Everything is stopped by pid (``ip netns pids``) and the namespaces are deleted at the end.
:func:`unavailable` says why namespaces cannot be made here (not root, no ``ip``), for a skip.

A process on a host changes the cluster through ``Hosts.attach(state)`` (``start_worker``)
and :func:`kill_namespace` (tests/support/netns_trainer.py does, mid-epoch).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HEAD_PORT = 6390
ADDRESSES = {"a": "192.0.2.1", "b": "192.0.2.2"}
#: the head marks a silent node dead after about period x threshold (Ray's default: ~15-30 s)
FAST_HEALTH_CHECK = {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "4",
    "RAY_health_check_initial_delay_ms": "0",
}
RAY_START_TIMEOUT_S = 120


def unavailable() -> str:
    """Why named network namespaces cannot be made here ("" when they can)."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "making network namespaces needs root"
    probe = f"hlprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return ""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Hosts:
    """Two hosts, "a" and "b", as network namespaces joined by a veth pair (see the module
    docstring). ``close()`` stops every process in them (by pid) and deletes them."""

    def __init__(self, ray_bin: str | None = None):
        tag = f"{os.getpid() % 100000}"
        self.ns = {h: f"hl{tag}{h}" for h in ADDRESSES}
        # short: Ray's unix sockets live under it (at most 107 bytes a path)
        self.workdir = tempfile.mkdtemp(prefix="hl", dir="/tmp")
        self._owns_workdir = True
        self.ray_bin = ray_bin or os.path.join(os.path.dirname(sys.executable), "ray")
        self.token = secrets.token_hex(16)
        self.head = f"{ADDRESSES['a']}:{HEAD_PORT}"
        try:
            for ns in self.ns.values():
                _ip("netns", "add", ns)
            va, vb = f"hv{tag}a", f"hv{tag}b"
            _ip("link", "add", va, "type", "veth", "peer", "name", vb)
            for h, dev in (("a", va), ("b", vb)):
                _ip("link", "set", dev, "netns", self.ns[h])
                _ip("-n", self.ns[h], "addr", "add", f"{ADDRESSES[h]}/24", "dev", dev)
                _ip("-n", self.ns[h], "link", "set", dev, "up")
                _ip("-n", self.ns[h], "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def env(self, host: str) -> dict:
        """The environment of every process on ``host``: token auth, its own Ray directory,
        fast node health checks, the tests on the import path."""
        tmp = os.path.join(self.workdir, f"ray-{host}")
        os.makedirs(tmp, exist_ok=True)
        tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.pathsep.join(p for p in (tests, os.path.dirname(tests), os.environ.get("PYTHONPATH")) if p)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(
            FAST_HEALTH_CHECK,
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN=self.token,
            RAY_TMPDIR=tmp,
            RAY_USAGE_STATS_ENABLED="0",
            PYTHONPATH=path,
            HYBRIDLOAD_NODE_POLL_S="0.5",
        )
        return env

    def run(self, host: str, argv: list[str], timeout_s: float, **kw) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``host`` and wait for it (at most ``timeout_s``)."""
        return subprocess.run(
            ["ip", "netns", "exec", self.ns[host], *argv],
            env=self.env(host),
            text=True,
            capture_output=True,
            timeout=timeout_s,
            **kw,
        )

    def start_head(self, cpus: int = 1) -> None:
        self._ray_start("a", ["--head", f"--port={HEAD_PORT}", f"--num-cpus={cpus}", "--include-dashboard=false"])

    def start_worker(self, cpus: int = 1) -> None:
        self._ray_start("b", [f"--address={self.head}", f"--num-cpus={cpus}"])

    def _ray_start(self, host: str, args: list[str]) -> None:
        done = self.run(
            host,
            [
                self.ray_bin,
                "start",
                f"--node-ip-address={ADDRESSES[host]}",
                "--object-store-memory=100000000",
                "--disable-usage-stats",
                *args,
            ],
            timeout_s=RAY_START_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise RuntimeError(f"ray start on host {host} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")

    def pids(self, host: str) -> list[int]:
        done = subprocess.run(["ip", "netns", "pids", self.ns[host]], capture_output=True, text=True, timeout=30)
        return [int(p) for p in done.stdout.split()]

    def kill(self, host: str, sig: int = signal.SIGKILL, wait_s: float = 10.0) -> None:
        """Send ``sig`` to every process on ``host``; wait until none is left (SIGKILL after ``wait_s``)."""
        kill_namespace(self.ns[host], sig, wait_s)

    def state(self) -> dict:
        """What a process on a host needs to change the cluster (see :meth:`attach`)."""
        return {"ns": self.ns, "workdir": self.workdir, "ray_bin": self.ray_bin, "token": self.token}

    @classmethod
    def attach(cls, state: dict) -> "Hosts":
        """The hosts described by ``state()`` (made elsewhere; not closed by this object)."""
        self = cls.__new__(cls)
        self.ns, self.workdir, self.ray_bin, self.token = (
            state["ns"],
            state["workdir"],
            state["ray_bin"],
            state["token"],
        )
        self._owns_workdir = False
        self.head = f"{ADDRESSES['a']}:{HEAD_PORT}"
        return self

    def close(self) -> None:
        """Stop every process on every host by pid, then delete the namespaces (with their links)."""
        for ns in self.ns.values():
            if os.path.exists(f"/var/run/netns/{ns}"):
                kill_namespace(ns, signal.SIGTERM, 2.0)
                subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def kill_namespace(ns: str, sig: int, wait_s: float) -> None:
    """Signal every process whose network namespace is ``ns`` (by pid); SIGKILL what is left after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
        pids = [int(p) for p in done.stdout.split() if int(p) != os.getpid()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig if time.monotonic() < deadline else signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
        if time.monotonic() > deadline + 10:
            raise RuntimeError(f"processes {pids} of namespace {ns} did not end")
