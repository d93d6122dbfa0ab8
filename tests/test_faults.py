"""Exactly once under faults, on the simulated 3-node cluster: an actor killed mid-epoch at
ten different points, a node removed mid-epoch, a deliberately slowed actor. (The GPU lane
raising mid-epoch is in test_dali_lane.py.) Each time the index stream equals the
fault-free stream, the pixels are identical, and stats() counts what happened."""

import hashlib
import logging
import time

import pytest

from hybridload import HybridLoader, LoaderPolicy, recipe, sources

from hybridload.lanes._ray.members import State
from support.ray_fixtures import alive_actors

REC = recipe.imagenet_train(48)
BS = 4  # 60 images -> 15 batches


def digest(batch):
    images, labels, idx = batch
    return tuple(idx.tolist()), tuple(labels.tolist()), hashlib.md5(images.numpy().tobytes()).hexdigest()


@pytest.fixture(scope="module")
def reference(photo_root):
    with HybridLoader(
        sources.ImageFolder(photo_root),
        REC,
        BS,
        seed=1,
        return_indices=True,
        policy=LoaderPolicy(cpu_actors=0, threads=2),
    ) as ld:
        return [digest(b) for b in ld]


def wait_until(pred, timeout):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"not within {timeout} s"
        time.sleep(0.1)


def wait_actors(n, timeout=30):
    deadline = time.monotonic() + timeout
    while len(alive_actors()) != n and time.monotonic() < deadline:
        time.sleep(0.25)
    return len(alive_actors())


#: the kill at the first batch (the killed actor may be the only one ready: the local stand-in
#: takes its batches), while the others are still starting (1, 2), and in the steady state mid-
#: and late in the epoch (5, 9); the indices between repeat the steady state's path (each case
#: starts and replaces Ray actors: seconds apiece)
KILL_AT = [0, 1, 2, 5, 9]


@pytest.mark.parametrize("kill_at", KILL_AT)
def test_an_actor_killed_mid_epoch_loses_and_repeats_nothing(ray_cluster, photo_root, reference, kill_at, caplog):
    import ray

    caplog.set_level(logging.WARNING, logger="hybridload")
    # a small window keeps work queued after the kill, so the dead actor is always noticed
    policy = LoaderPolicy(ray_address="embedded", cpu_actors=3, reserve_local_cpus=1, batch_timeout_s=60, window=3)
    got, gaps = [], []
    with HybridLoader(sources.ImageFolder(photo_root), REC, BS, seed=1, return_indices=True, policy=policy) as ld:
        t_last = None
        for k, batch in enumerate(ld):
            got.append(digest(batch))
            now = time.monotonic()
            if t_last is not None and k > kill_at:
                gaps.append(now - t_last)
            t_last = now
            if k == kill_at:
                lane = ld._ensure_lanes()[0]
                victim = max(lane.members(), key=lambda m: m.load)  # one holding work
                ray.kill(victim.handle, no_restart=True)
                held_work = victim.load > 0
        stats = ld.stats()
        if held_work:  # its batch went to another worker, and the pool starts a replacement for the lost actor
            # (counted when it is asked for: a replacement's way to ready is test_actor_start_failures.py's)
            assert stats["retries"] >= 1 and stats["actor_pools"]["ray"]["lost"] == 1
            pool = ld.stats()["actor_pools"]["ray"]

            def all_replaced():  # the lost actor, and any start that failed on the loaded box, each once
                nonlocal pool
                pool = ld.stats()["actor_pools"]["ray"]
                return pool["replaced"] >= pool["lost"] + pool["failed_starts"]

            wait_until(all_replaced, 60)
            assert pool["replaced"] == pool["lost"] + pool["failed_starts"] and pool["lost"] == 1, pool
    assert got == reference  # same indices, same labels, bit-identical pixels, nothing lost or repeated
    # every image on the Ray lane, or on the local stand-in while the pool had no ready actor
    # (the killed one the only one ready yet: the others were still starting)
    assert stats["lanes"]["ray"]["images"] + stats.get("fallback", {}).get("images", 0) == 60
    if stats["retries"]:
        assert "died" in caplog.text and "goes to another worker" in caplog.text
    assert max(gaps, default=0) < 30  # recovered well inside the batch timeout
    assert wait_actors(0) == 0


def two_epochs(loader, on_batch=lambda k: None):
    out = []
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        for batch in loader:
            out.append(digest(batch))
            on_batch(len(out) - 1)
    return out


def test_a_node_removed_mid_epoch_loses_and_repeats_nothing(ray_cluster, photo_root, caplog):
    import ray

    cluster, _workers = ray_cluster
    with HybridLoader(
        sources.ImageFolder(photo_root),
        REC,
        BS,
        seed=1,
        return_indices=True,
        policy=LoaderPolicy(cpu_actors=0, threads=2),
    ) as ld:
        reference = two_epochs(ld)
    caplog.set_level(logging.WARNING, logger="hybridload")
    extra = cluster.add_node(num_cpus=1, object_store_memory=150 * 1024 * 1024, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes(timeout=60)
    removed = False
    try:
        policy = LoaderPolicy(ray_address="embedded", cpu_actors=3, reserve_local_cpus=2, batch_timeout_s=90)
        with HybridLoader(sources.ImageFolder(photo_root), REC, BS, seed=1, return_indices=True, policy=policy) as ld:
            lane = ld._ensure_lanes()[0]

            def on_extra():
                return [m for m in lane.members() if m.node_id == extra.node_id and m.state is State.READY]

            # one actor lives on the node we remove, ready before the epoch starts (on a loaded
            # machine its start can fail and be retried; a node that never got work loses nothing),
            # and so do the others: the lost node's batches go to them, not to the local stand-in
            wait_until(lambda: on_extra() and lane.parallelism == 3, 120)

            def remove(k):
                nonlocal removed
                if not removed and k >= 2 and any(m.load > 0 for m in on_extra()):  # it holds work
                    cluster.remove_node(extra, allow_graceful=False)
                    removed = True
                    # the training step takes a while: long enough for Ray to declare the node dead
                    deadline = time.monotonic() + 60
                    while time.monotonic() < deadline and any(
                        n["NodeID"] == extra.node_id and n["Alive"] for n in ray.nodes()
                    ):
                        time.sleep(0.2)

            got = two_epochs(ld, remove)
            stats = ld.stats()
        assert removed, "the actor on the extra node never held work"
        assert got == reference
        # the pool counted the node's actor as lost: through a task that failed on it (its batches
        # retried), a re-issue (the node went silent before Ray declared it dead), or the keeper's
        # check of idle actors (its batch had come back just before the node went)
        assert stats["actor_pools"]["ray"]["lost"] >= 1, stats["actor_pools"]["ray"]
        assert stats["lanes"]["ray"]["images"] == 120
    finally:
        if not removed:
            cluster.remove_node(extra)
    alive = [n for n in ray.nodes() if n["Alive"]]
    assert len(alive) == 3


class SlowOnOneActor(sources.FileList):
    """Reads normally, except in the actor whose name ends in '-0', where every read stalls."""

    def __init__(self, paths, labels, delay):
        super().__init__(paths, labels)
        self.delay = delay

    def read(self, ref):
        try:
            import ray

            name = ray.get_runtime_context().get_actor_name() or ""
        except Exception:
            name = ""
        if name.endswith("-0"):
            time.sleep(self.delay)
        return super().read(ref)


def test_a_slowed_actor_does_not_hold_the_stream_back(ray_cluster, photo_root, reference):
    src0 = sources.ImageFolder(photo_root)
    src = SlowOnOneActor(src0.paths, src0._labels, delay=2.0)  # a batch on actor 0 takes >= 8 s
    policy = LoaderPolicy(
        ray_address="embedded",
        cpu_actors=3,
        reserve_local_cpus=1,
        straggler_factor=3.0,
        straggler_min_s=1.0,
        batch_timeout_s=60,
    )
    t0 = time.monotonic()
    with HybridLoader(src, REC, BS, seed=1, return_indices=True, policy=policy) as ld:
        # the pool works from its first ready actor on: wait for all three, so the slow one takes its share
        ld._ensure_lanes()
        wait_until(lambda: ld._lanes[0].parallelism == 3, 60)
        got = [digest(b) for b in ld]
        stats = ld.stats()
    elapsed = time.monotonic() - t0
    assert got == reference
    assert stats["reissued"] >= 1
    # without re-issuing, actor 0's share of 15 batches (about 5) would cost >= 40 s
    assert elapsed < 30, elapsed
