"""A rank that joins its job's embedded Ray cluster fails within seconds, naming the address,
when no Ray GCS answers there: before, ``ray.init`` retried for many minutes inside Ray's C++
client (deaf to the launcher's SIGTERM), and gloo then timed out on the other ranks (issue 29).
Real parts: a TCP listener on loopback that accepts and never speaks (the case ``ray.init``
waits on; a closed port was already refused within seconds by the listening check), and
Ray's own GCS client."""

import json
import os
import signal
import socket
import subprocess
import sys
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from hybridload.raycluster import _gcs_probe as gcs_probe, _last_out as last_out
from support.streams import free_port

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def silent_listener():
    """A loopback address where a TCP server accepts every connection and says nothing."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(0.2)
        held, stop = [], threading.Event()

        def accept():
            while not stop.is_set():
                try:
                    held.append(server.accept()[0])
                except OSError:
                    pass

        acceptor = threading.Thread(target=accept, daemon=True)
        acceptor.start()
        try:
            yield "127.0.0.1:%d" % server.getsockname()[1]
        finally:
            stop.set()
            acceptor.join(5)
            for conn in held:
                conn.close()


JOIN_SILENT = """
import json, sys, time, ray
from hybridload.raycluster import _connect as connect
start = time.monotonic()
try:
    connect._join(ray, sys.argv[1])
except ConnectionError as exc:
    print(json.dumps({"message": str(exc), "took": time.monotonic() - start, "connected": ray.is_initialized()}))
"""


@pytest.mark.timeout(60)
def test_a_join_where_no_gcs_answers_fails_within_seconds_naming_the_address():
    """In a process of its own: the join turns on Ray's token authentication where a token
    exists (as Ray's "auto" does), Ray state that outlives the test and broke the later in-process
    cluster's nodes."""
    with silent_listener() as address:
        env = dict(os.environ, PYTHONPATH=str(ROOT), **{gcs_probe.JOIN_TIMEOUT_ENV: "3"})
        proc = subprocess.run(
            [sys.executable, "-c", JOIN_SILENT, address], env=env, capture_output=True, text=True, timeout=45
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert address in got["message"] and "\n" not in got["message"]
    assert got["took"] < 15, f"the join gave up after {got['took']:.1f} s"
    assert got["connected"] is False  # nothing of Ray was left half-connected in that process


@pytest.mark.timeout(60)
def test_a_rank_waiting_on_a_join_ends_on_its_launchers_sigterm():
    """Inside ray.init's C++ wait the rank ignored SIGTERM; waiting on the bounded probe it ends."""
    with silent_listener() as address:
        code = (
            "import sys, ray; from hybridload.raycluster import _connect as connect; print('joining', flush=True); "
            "connect._join(ray, sys.argv[1])"
        )
        env = dict(os.environ, PYTHONPATH=str(ROOT), **{gcs_probe.JOIN_TIMEOUT_ENV: "45"})
        proc = subprocess.Popen([sys.executable, "-c", code, address], env=env, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "joining"
            time.sleep(1.5)  # inside the join's wait now
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert proc.returncode == -signal.SIGTERM and took < 5


@pytest.mark.parametrize("raw, expected", [("", 20.0), ("2.5", 2.5)])
def test_the_join_timeout_is_read_from_the_environment(raw, expected):
    assert gcs_probe.join_timeout_s({gcs_probe.JOIN_TIMEOUT_ENV: raw}) == expected


@pytest.mark.parametrize("raw", ["soon", "0", "-1"])
def test_a_bad_join_timeout_names_the_variable_and_what_to_write(raw):
    with pytest.raises(ValueError, match=f"{gcs_probe.JOIN_TIMEOUT_ENV}=.*such as 20"):
        gcs_probe.join_timeout_s({gcs_probe.JOIN_TIMEOUT_ENV: raw})


RANK = """
import os, sys, time
from hybridload.raycluster import _connect as connect
ray = connect.acquire(None)  # no RAY_ADDRESS: the job's embedded cluster on this machine
print("connected", ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.readline()  # until the test says go
if sys.argv[1] == "joiner":  # the owner is exiting now: the cluster must still serve this rank
    @ray.remote(num_cpus=0)
    def echo(x):
        return x
    assert ray.get(echo.remote(ray.put(41))) + 1 == 42
    print("served", flush=True)
"""


def _rank(role, env):
    return subprocess.Popen(
        [sys.executable, "-c", RANK, role], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


@pytest.mark.timeout(120)
def test_the_rank_that_started_the_embedded_cluster_leaves_after_the_ranks_that_joined_it(tmp_path):
    """The starting rank exited first and Ray ended the joined rank with exit status 1 ("The
    connection to the plasma store is failed"): a finished torchrun job reported as failed."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(
        PYTHONPATH=str(ROOT),
        LOCAL_WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        TORCHELASTIC_RUN_ID=f"{tmp_path.name}-{os.getpid()}",
    )  # a job of its own
    owner = _rank("owner", env)
    joiner = None
    try:
        first = owner.stdout.readline().split()
        assert first[:1] == ["connected"]
        joiner = _rank("joiner", env)
        assert joiner.stdout.readline().split() == first  # the same cluster
        owner.stdin.close()  # the owner's script ends: its interpreter exits now
        time.sleep(3)  # long enough for Ray to take the cluster down, were the owner not waiting
        assert owner.poll() is None, "the starting rank left while a joined rank was connected"
        joiner.stdin.write("go\n")
        joiner.stdin.flush()
        assert joiner.stdout.readline().strip() == "served"
        assert joiner.wait(timeout=60) == 0
        assert owner.wait(timeout=30) == 0  # and then it leaves, soon after the joined rank
    finally:
        for proc in (owner, joiner):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_the_drivers_the_starting_rank_waits_for():
    jobs = [
        {"DriverPid": 10, "IsDead": False},
        {"DriverPid": 11, "IsDead": False},
        {"DriverPid": 12, "IsDead": True},
        {"DriverPid": 13, "IsDead": False},
        {"DriverPid": 0},
    ]
    assert last_out.other_live_drivers(jobs, me=10, alive=lambda pid: pid != 13) == [11]


AUTO_TWICE = """
from hybridload.raycluster import _connect as connect
ray = connect.acquire("auto", fallback_embedded=True)
first = ray.get_runtime_context().gcs_address
connect.release()
ray = connect.acquire("auto", fallback_embedded=True)  # the next pass of a loader asks again
print("GCS", first, ray.get_runtime_context().gcs_address, flush=True)
"""


@pytest.mark.timeout(120)
def test_a_stale_ray_start_record_does_not_replace_the_embedded_cluster_at_each_pass():
    """Ray's record of a `ray start` cluster that is gone: each pass's "auto" read it again,
    shut the embedded cluster down (under the ranks that had joined it, who died with it) and
    started another."""
    short = tempfile.mkdtemp(prefix="hl", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    try:
        os.makedirs(os.path.join(short, "ray"))
        with open(os.path.join(short, "ray", "ray_current_cluster"), "w") as f:
            f.write("127.0.0.1:%d" % free_port())  # nothing listens there now
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(PYTHONPATH=str(ROOT), RAY_TMPDIR=short)
        proc = subprocess.run([sys.executable, "-c", AUTO_TWICE], env=env, capture_output=True, text=True, timeout=100)
    finally:
        shutil.rmtree(short, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("GCS ")][-1].split()
    assert line[1] == line[2] and line[1].startswith("127.0.0.1:")  # one embedded cluster, kept
