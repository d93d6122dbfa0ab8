"""A rank that joins its job's embedded Ray cluster fails within seconds, naming the address,
when no Ray GCS answers there: before, ``ray.init`` retried for many minutes inside Ray's C++
client (deaf to the launcher's SIGTERM), and gloo then timed out on the other ranks (issue 29).
Real parts: a TCP listener on loopback that accepts and never speaks (the case ``ray.init``
waits on; a closed port was already refused within seconds by the listening check), and
Ray's own GCS client."""

import socket
import threading
import time

import pytest

from hybridload.cluster import connect, gcs_probe

ray = pytest.importorskip("ray")


@pytest.mark.timeout(60)
def test_a_join_where_no_gcs_answers_fails_within_seconds_naming_the_address(monkeypatch):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        held = []
        stop = threading.Event()

        def accept():  # accept every connection and say nothing, as a wrong service would
            server.settimeout(0.2)
            while not stop.is_set():
                try:
                    held.append(server.accept()[0])
                except OSError:
                    pass

        acceptor = threading.Thread(target=accept, daemon=True)
        acceptor.start()
        address = "127.0.0.1:%d" % server.getsockname()[1]
        monkeypatch.setenv(gcs_probe.JOIN_TIMEOUT_ENV, "3")
        start = time.monotonic()
        try:
            with pytest.raises(ConnectionError) as info:
                connect._join(ray, address)
        finally:
            stop.set()
            acceptor.join(5)
            for conn in held:
                conn.close()
        took = time.monotonic() - start
    message = str(info.value)
    assert address in message and "\n" not in message
    assert took < 15, f"the join gave up after {took:.1f} s"
    assert not ray.is_initialized()  # nothing of Ray was left half-connected in this process


@pytest.mark.parametrize("raw, expected", [("", 20.0), ("2.5", 2.5)])
def test_the_join_timeout_is_read_from_the_environment(raw, expected):
    assert gcs_probe.join_timeout_s({gcs_probe.JOIN_TIMEOUT_ENV: raw}) == expected


@pytest.mark.parametrize("raw", ["soon", "0", "-1"])
def test_a_bad_join_timeout_names_the_variable_and_what_to_write(raw):
    with pytest.raises(ValueError, match=f"{gcs_probe.JOIN_TIMEOUT_ENV}=.*such as 20"):
        gcs_probe.join_timeout_s({gcs_probe.JOIN_TIMEOUT_ENV: raw})
