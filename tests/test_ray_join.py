"""A rank that joins its job's embedded Ray cluster fails within seconds, naming the address,
when no Ray GCS answers there: before, ``ray.init`` retried for many minutes inside Ray's C++
client (deaf to the launcher's SIGTERM), and gloo then timed out on the other ranks (issue 29).
Real parts: a TCP listener on loopback that accepts and never speaks (the case ``ray.init``
waits on; a closed port was already refused within seconds by the listening check), and
Ray's own GCS client."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from hybridload.cluster import connect, gcs_probe

ray = pytest.importorskip("ray")

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


@pytest.mark.timeout(60)
def test_a_join_where_no_gcs_answers_fails_within_seconds_naming_the_address(monkeypatch):
    monkeypatch.setenv(gcs_probe.JOIN_TIMEOUT_ENV, "3")
    with silent_listener() as address:
        start = time.monotonic()
        with pytest.raises(ConnectionError) as info:
            connect._join(ray, address)
        took = time.monotonic() - start
    message = str(info.value)
    assert address in message and "\n" not in message
    assert took < 15, f"the join gave up after {took:.1f} s"
    assert not ray.is_initialized()  # nothing of Ray was left half-connected in this process


@pytest.mark.timeout(60)
def test_a_rank_waiting_on_a_join_ends_on_its_launchers_sigterm():
    """Inside ray.init's C++ wait the rank ignored SIGTERM; waiting on the bounded probe it ends."""
    with silent_listener() as address:
        code = ("import sys, ray; from hybridload.cluster import connect; print('joining', flush=True); "
                "connect._join(ray, sys.argv[1])")
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
