"""The elastic Ray actor pool on the simulated loopback cluster: nodes leave, join and are
drained mid-epoch; the stream stays the fault-free stream and the pool returns to its target,
using the nodes that joined, without leaking actors. The pool polls the node table every
0.5 s here (HYBRIDLOAD_NODE_POLL_S)."""

import hashlib

import pytest

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.lanes._ray.members import State

from support.ray_fixtures import STORE, alive_actors
from support.waits import wait_until

REC = recipe.imagenet_train(32)
BS = 6  # 60 images -> 10 batches an epoch
CHURNS = 5
# remote-first with the trainer's 2 CPUs reserved: one actor on every worker node's CPU
POLICY = LoaderPolicy(ray_address="embedded", reserve_local_cpus=2, batch_timeout_s=120)


@pytest.fixture
def fast_poll(monkeypatch):
    monkeypatch.setenv("HYBRIDLOAD_NODE_POLL_S", "0.5")


def digest(batch):
    images, labels, idx = batch
    return tuple(idx.tolist()), tuple(labels.tolist()), hashlib.md5(images.numpy().tobytes()).hexdigest()


def reference(root, epochs):
    with HybridLoader(
        sources.ImageFolder(root), REC, BS, seed=2, return_indices=True, policy=LoaderPolicy(cpu_actors=0, threads=2)
    ) as ld:
        out = []
        for e in epochs:
            ld.set_epoch(e)
            out += [digest(b) for b in ld]
        return out


def add_node(cluster):
    node = cluster.add_node(num_cpus=1, object_store_memory=STORE, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes(timeout=60)
    return node


def ready_nodes(lane):
    return sorted(m.node_id for m in lane.members() if m.state is State.READY)


def test_five_node_churns_mid_epoch_keep_the_stream_and_the_pool_regains_its_target_on_new_nodes(
    ray_cluster, photo_root, fast_poll
):
    cluster, workers = ray_cluster
    epochs = range(CHURNS + 1)
    expected = reference(photo_root, epochs)
    extra = add_node(cluster)
    target = len(workers) + 1
    got, new_nodes = [], []
    try:
        with HybridLoader(sources.ImageFolder(photo_root), REC, BS, seed=2, return_indices=True, policy=POLICY) as ld:
            for epoch in epochs:
                ld.set_epoch(epoch)
                for k, batch in enumerate(ld):
                    got.append(digest(batch))
                    lane = ld._lanes[0]
                    if k == 2 and epoch < CHURNS:  # a worker node leaves mid-epoch, a fresh one joins
                        # every actor joined (the pool starts at its first ready actor, the rest join as they come
                        # up): the lost node's batches go to the other actors, not to the local stand-in
                        wait_until(
                            lambda: len(ready_nodes(lane)) == target and extra.node_id in ready_nodes(lane),
                            60,
                            f"{target} ready actors, one on the extra node (have {ready_nodes(lane)})",
                        )
                        cluster.remove_node(extra, allow_graceful=True)
                        extra = add_node(cluster)
                        new_nodes.append(extra.node_id)
                if epoch < CHURNS:  # by the next epoch: the target again, one actor on the new node
                    wait_until(
                        lambda: len(ready_nodes(lane)) == target and extra.node_id in ready_nodes(lane),
                        60,
                        f"{target} ready actors, one on the new node (have {ready_nodes(lane)})",
                    )
                    # no leak: the cluster runs exactly the pool's actors
                    wait_until(
                        lambda: len(alive_actors()) == target,
                        30,
                        f"{target} hybridload actors alive in the cluster (have {alive_actors()})",
                    )
            stats = ld.stats()
        assert got == expected  # same indices, labels and pixels: nothing lost or repeated
        pool = stats["actor_pools"]["ray"]
        assert pool["live"] == pool["target"] == target
        assert pool["lost"] == pool["replaced"] >= CHURNS  # every lost actor was replaced
        assert stats["lanes"]["ray"]["images"] == 60 * len(epochs)
    finally:
        cluster.remove_node(extra)
    wait_until(lambda: alive_actors() == [], 30, "no hybridload actor left after close")


def test_a_drained_node_finishes_its_batches_then_its_actor_stops_without_a_retry(ray_cluster, photo_root, fast_poll):
    import ray
    from ray.core.generated import autoscaler_pb2

    cluster, workers = ray_cluster
    expected = reference(photo_root, [0])
    extra = add_node(cluster)
    try:
        with HybridLoader(sources.ImageFolder(photo_root), REC, BS, seed=2, return_indices=True, policy=POLICY) as ld:
            got = []
            for k, batch in enumerate(ld):
                got.append(digest(batch))
                lane = ld._lanes[0]
                if k == 0:
                    assert ld.stats()["actor_pools"]["ray"]["target"] == len(workers) + 1
                if k == 1:
                    gcs = ray._raylet.GcsClient(address=cluster.address)
                    accepted, why = gcs.drain_node(
                        extra.node_id,
                        autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
                        "test drain",
                        0,
                    )
                    assert accepted, why
                    wait_until(lambda: extra.node_id not in lane.nodes, 30, "the drained node's actor stopped")
            stats = ld.stats()
        assert got == expected
        pool = stats["actor_pools"]["ray"]
        assert (pool["stopped"], pool["lost"], stats["retries"]) == (1, 0, 0)
        assert pool["target"] == len(workers)
    finally:
        cluster.remove_node(extra)
    wait_until(lambda: alive_actors() == [], 30, "no hybridload actor left after close")


def test_losing_the_only_actor_holds_its_batches_until_the_replacement_is_ready(ray_cluster, photo_root, fast_poll):
    import ray

    expected = reference(photo_root, [0])
    # no local stand-in (on_no_actors="raise"): the pool holds the batches while the replacement starts
    policy = LoaderPolicy(
        ray_address="embedded",
        placement="local",
        reserve_local_cpus=1,
        cpu_actors=1,
        batch_timeout_s=120,
        window=3,
        on_no_actors="raise",
    )
    with HybridLoader(sources.ImageFolder(photo_root), REC, BS, seed=2, return_indices=True, policy=policy) as ld:
        got = []
        for k, batch in enumerate(ld):
            got.append(digest(batch))
            if k == 1:
                (only,) = ld._lanes[0].members()
                ray.kill(only.handle, no_restart=True)
        stats = ld.stats()
    assert got == expected
    pool = stats["actor_pools"]["ray"]
    assert pool["lost"] == pool["replaced"] == 1 and pool["live"] == 1
    wait_until(lambda: alive_actors() == [], 30, "no hybridload actor left after close")
