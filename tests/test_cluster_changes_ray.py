"""When the cluster changes under the loader, on the simulated loopback cluster (the shared
3-node ``ray_cluster``): a rank the cluster cannot give actors runs on this machine's local
lane, moves to Ray actors when a node joins and back when it leaves, with the stream of the
local lane and every sample once; ``on_no_actors="raise"``/``"wait"`` fail with a named error.
Rank 2 of 3 stands for "the cluster has no CPU for this rank": with the trainer's 2 CPUs
reserved the cluster has 2 worker CPUs, dealt to ranks 0 and 1. The pool polls the node
table every 0.5 s here."""

from __future__ import annotations

import logging
import time

import pytest

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import NoActorsError

from support.ray_fixtures import STORE, alive_actors
from support.streams import stream
from support.waits import wait_until

REC = recipe.imagenet_train(32)
BS = 2  # 60 images, 3 ranks: 10 batches a rank an epoch
RANK = dict(rank=2, world_size=3)


@pytest.fixture
def fast_poll(monkeypatch):
    monkeypatch.setenv("HYBRIDLOAD_NODE_POLL_S", "0.5")


def loader(root, **policy):
    return HybridLoader(
        sources.ImageFolder(root),
        REC,
        BS,
        seed=3,
        return_indices=True,
        **RANK,
        policy=LoaderPolicy(ray_address="embedded", reserve_local_cpus=2, batch_timeout_s=120, **policy),
    )


def test_a_rank_without_actors_runs_locally_moves_to_a_node_that_joins_and_back_when_it_leaves(
    ray_cluster, photo_root, fast_poll, caplog
):
    from support.streams import batch_digest

    cluster, _ = ray_cluster
    with HybridLoader(
        sources.ImageFolder(photo_root),
        REC,
        BS,
        seed=3,
        return_indices=True,
        **RANK,
        policy=LoaderPolicy(cpu_actors=0, threads=2),
    ) as ref:
        expected = stream(ref, (0, 1))
    got, extra = [], None
    try:
        with caplog.at_level(logging.WARNING, logger="hybridload.lanes._ray.capacity"):
            ld = loader(photo_root, window=2)
            it = iter(ld)
        with ld:
            pool = ld._lanes[0]
            start_warnings = [r.message for r in caplog.records]
            got += [batch_digest(next(it)) for _ in range(2)]  # on the local stand-in
            extra = cluster.add_node(num_cpus=1, object_store_memory=STORE, node_ip_address="127.0.0.1")
            wait_until(lambda: pool.parallelism == 1, 60, "an actor for rank 2 on the grown cluster")
            got += [batch_digest(b) for b in it]
            moved = ld.stats()["lanes"].get("ray", {}).get("batches", 0)
            ld.set_epoch(1)
            it = iter(ld)
            got += [batch_digest(next(it)) for _ in range(2)]
            cluster.remove_node(extra, allow_graceful=True)
            extra = None
            wait_until(lambda: pool.parallelism == 0, 60, "rank 2's actor gone with the node")
            got += [batch_digest(b) for b in it]
            stats = ld.stats()
    finally:
        if extra is not None:
            cluster.remove_node(extra)
    assert got == expected  # the local lane's stream: every sample once, same pixels
    assert len(start_warnings) == 1 and "no CPU in the Ray cluster for rank 2's actors" in start_warnings[0]
    assert moved >= 1  # work moved to the Ray actor once the node joined
    fb, pools = stats["fallback"], stats["actor_pools"]["ray"]
    assert fb["lanes"] == ["local-fallback"] and fb["batches"] >= 4 and fb["without_actors_s"] > 0
    assert fb["batches"] + stats["lanes"]["ray"]["batches"] == 20
    events = [e["event"] for e in pools["node_events"]]
    assert events[0] == "no actor" and "joined" in events and "actors again" in events and "left" in events
    assert events[-1] == "no actor"
    wait_until(lambda: alive_actors() == [], 30, "no hybridload actor left after close")


def test_under_on_no_actors_raise_a_rank_without_actors_is_a_named_error_naming_the_nodes(ray_cluster, photo_root):
    with loader(photo_root, on_no_actors="raise") as ld:
        with pytest.raises(NoActorsError, match=r"no CPU left for rank 2's actors.*nodes now: .*\(trainer\)"):
            iter(ld)


def test_under_on_no_actors_wait_a_rank_without_actors_fails_after_the_bound(ray_cluster, photo_root, fast_poll):
    t0 = time.monotonic()
    with loader(photo_root, on_no_actors="wait", actor_wait_s=1.0) as ld:
        with pytest.raises(NoActorsError, match=r"waited 1 s for a node"):
            iter(ld)
    assert time.monotonic() - t0 < 30


def test_rank_1_of_2_on_a_2_cpu_node_with_one_reserved_runs_locally_instead_of_stopping(
    ray_cluster, photo_root, caplog
):
    """The 2-ranks-on-2-cores case: the trainer's node has 2 CPUs, 1 reserved, so its one slot
    goes to rank 0 and rank 1 gets none ("no CPU left for rank 1's actors" before)."""
    kw = dict(seed=3, return_indices=True, rank=1, world_size=2)
    with HybridLoader(
        sources.ImageFolder(photo_root), REC, BS, policy=LoaderPolicy(cpu_actors=0, threads=2), **kw
    ) as ref:
        expected = stream(ref)
    policy = LoaderPolicy(ray_address="embedded", placement="local", reserve_local_cpus=1)
    with caplog.at_level(logging.WARNING, logger="hybridload.lanes._ray.capacity"):
        with HybridLoader(sources.ImageFolder(photo_root), REC, BS, policy=policy, **kw) as ld:
            got = stream(ld)
            stats = ld.stats()
    assert got == expected
    assert stats["fallback"]["batches"] == len(expected) and "ray" not in stats["lanes"]
    (warning,) = [r.message for r in caplog.records]
    assert "no CPU in the Ray cluster for rank 1's actors" in warning and "reserve_local_cpus=1" in warning


def test_under_on_no_actors_wait_the_loader_starts_on_a_node_that_joins_within_the_bound(
    ray_cluster, photo_root, fast_poll
):
    import threading

    cluster, _ = ray_cluster
    with HybridLoader(
        sources.ImageFolder(photo_root),
        REC,
        BS,
        seed=3,
        return_indices=True,
        **RANK,
        policy=LoaderPolicy(cpu_actors=0, threads=2),
    ) as ref:
        expected = stream(ref)
    out: dict = {}

    def consume(ld):  # iter() waits for a node, then every batch runs on its actor
        try:
            out["got"], out["stats"] = stream(ld), ld.stats()
        except BaseException as exc:
            out["error"] = exc

    extra = None
    try:
        with loader(photo_root, on_no_actors="wait", actor_wait_s=60) as ld:
            consumer = threading.Thread(target=consume, args=(ld,), daemon=True)
            consumer.start()
            time.sleep(1.0)  # the loader is waiting for a node now
            extra = cluster.add_node(num_cpus=1, object_store_memory=STORE, node_ip_address="127.0.0.1")
            consumer.join(90)
            assert not consumer.is_alive(), "the pass did not end within 90 s"
    finally:
        if extra is not None:
            cluster.remove_node(extra)
    assert "error" not in out, out.get("error")
    got, stats = out["got"], out["stats"]
    assert got == expected
    assert stats["lanes"]["ray"]["batches"] == len(expected) and "fallback" not in stats
    wait_until(lambda: alive_actors() == [], 30, "no hybridload actor left after close")


def test_under_on_no_actors_raise_losing_the_last_node_mid_epoch_names_it_in_a_no_lane_error(
    ray_cluster, photo_root, fast_poll
):
    from hybridload.errors import NoLaneError

    cluster, _ = ray_cluster
    extra = cluster.add_node(num_cpus=1, object_store_memory=STORE, node_ip_address="127.0.0.1")
    try:
        with loader(photo_root, on_no_actors="raise", window=2) as ld:
            it = iter(ld)
            next(it)
            cluster.remove_node(extra, allow_graceful=True)
            extra = None
            wait_until(lambda: ld._lanes[0].parallelism == 0, 60, "rank 2's actor gone with the node")
            with pytest.raises(NoLaneError) as err:
                for _ in it:
                    pass
    finally:
        if extra is not None:
            cluster.remove_node(extra)
    msg = str(err.value)
    assert "lane 'ray':" in msg and "no node with a free CPU for rank 2 since" in msg
    assert "What to do: add or restart worker nodes" in msg
    wait_until(lambda: alive_actors() == [], 30, "no hybridload actor left after close")
