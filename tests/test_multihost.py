"""The loader on two real hosts: network namespaces joined by a veth pair (192.0.2.1, the head
and the trainer; 192.0.2.2, a worker host), Ray started on them with ``ray start`` and token
authentication (tests/support/netns_hosts.py). The trainer runs on host a with
``LoaderPolicy(ray_address="192.0.2.1:6390", placement="remote-first", cpu_actors=1,
reserve_local_cpus=1)``: its own node (1 CPU, reserved) has no slot, so the one actor runs on
host b when b is there. Each test runs one epoch (tests/support/netns_trainer.py) under a
deadline and checks the stream is the local lane's, every sample once, while the cluster
changes: nothing changes; host b is killed mid-epoch; host b joins only after the loader
started; host b is drained (``ray drain-node``) mid-epoch. Skipped, saying why, where network
namespaces cannot be made. One pair of hosts serves the whole module."""

from __future__ import annotations

import json
import os
import sys

import pytest

from hybridload.cli.demo_data import make_photo_folder

from support import netns_hosts

TRAINER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support", "netns_trainer.py")
DEADLINE_S = 60
RUN_TIMEOUT_S = 240  # one trainer run: interpreter + reference epoch + Ray epoch + the change


class Cluster:
    """The two hosts with Ray on them, and whether host b's node is up, down or drained."""

    def __init__(self, hosts: netns_hosts.Hosts):
        self.hosts, self.b = hosts, "down"

    def worker(self, want: str) -> None:
        """Bring host b to ``want`` ("up" or "down") unless it is there already."""
        if self.b != want:
            self.hosts.kill("b")
            self.b = "down"
        if want == "up" and self.b != "up":
            self.hosts.start_worker()
            self.b = "up"

    def train(self, data: str, nodes: int, at: int = -1, action: str = "none", wait: str = "none") -> dict:
        argv = [
            sys.executable,
            TRAINER,
            "--data",
            data,
            "--state",
            json.dumps(self.hosts.state()),
            "--nodes",
            str(nodes),
            "--at",
            str(at),
            "--action",
            action,
            "--wait",
            wait,
            "--deadline",
            str(DEADLINE_S),
        ]
        done = self.hosts.run("a", argv, timeout_s=RUN_TIMEOUT_S)
        self.b = {"kill-b": "down", "start-b": "up", "drain-b": "drained"}.get(action, self.b)
        assert done.returncode == 0, f"the trainer failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
        return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cluster():
    why = netns_hosts.unavailable()
    if why:
        pytest.skip(f"no network namespaces here: {why}")
    hosts = netns_hosts.Hosts()
    try:
        hosts.start_head(cpus=1)
        yield Cluster(hosts)
    finally:
        hosts.close()
    assert not os.path.exists(f"/var/run/netns/{hosts.ns['a']}"), "a namespace outlived the test"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """48 photos in 3 classes: 12 batches of 4."""
    return str(make_photo_folder(tmp_path_factory.mktemp("photos"), 48, num_classes=3, seed=4))


def check_every_sample_once(out: dict) -> None:
    assert out["same_stream"], "the stream differs from the local lane's"
    assert out["indices"] == list(range(out["samples"]))  # every sample once


def events(out: dict) -> list[str]:
    return [e["event"] for e in out["stats"]["actor_pools"]["ray"]["node_events"]]


def test_the_stream_on_a_worker_host_equals_the_local_lanes(cluster, data):
    cluster.worker("up")
    out = cluster.train(data, nodes=2)
    check_every_sample_once(out)
    assert out["stats"]["lanes"]["ray"]["batches"] == out["batches"]  # all on host b's actor
    assert out["stats"]["fallback"]["batches"] == 0


def test_the_worker_host_killed_mid_epoch_leaves_the_rest_to_the_local_lane(cluster, data):
    cluster.worker("up")
    out = cluster.train(data, nodes=2, at=2, action="kill-b", wait="node-left")
    check_every_sample_once(out)
    stats = out["stats"]
    assert stats["lanes"]["ray"]["batches"] >= 3 and stats["fallback"]["batches"] >= 1
    assert "left" in events(out) and "no actor" in events(out)
    assert stats["fallback"]["without_actors_s"] > 0


def test_a_worker_host_that_joins_after_the_loader_started_takes_the_work(cluster, data):
    cluster.worker("down")
    out = cluster.train(data, nodes=1, at=1, action="start-b", wait="actors")
    check_every_sample_once(out)
    stats = out["stats"]
    assert stats["fallback"]["batches"] >= 2  # before host b joined: this machine's local lane
    assert stats["lanes"]["ray"]["batches"] >= 1  # after: host b's actor (window 2: the rest moved)
    assert events(out)[:1] == ["no actor"] and "joined" in events(out) and "actors again" in events(out)


def test_a_host_drained_mid_epoch_finishes_its_batches_and_the_rest_run_locally(cluster, data):
    cluster.worker("up")
    out = cluster.train(data, nodes=2, at=2, action="drain-b", wait="no-actors")
    check_every_sample_once(out)
    stats = out["stats"]
    assert "draining" in events(out) and stats["actor_pools"]["ray"]["lost"] == 0
    assert stats["lanes"]["ray"]["batches"] >= 3 and stats["fallback"]["batches"] >= 1
