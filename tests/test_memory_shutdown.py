"""Bounded memory over 50 epochs, a consumer that stops reading, and shutdown by close(),
garbage collection, KeyboardInterrupt and interpreter exit."""

import gc
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from support.readings import rss_mb, store_used_mb

from hybridload import HybridLoader, LoaderPolicy, recipe, sources

from support.ray_fixtures import alive_actors

REC = recipe.imagenet_train(64)


def settled_store_mb(timeout_s: float = 10.0) -> float:
    """The object store's use once Ray has freed what the last batches released (frees are
    asynchronous): the lowest reading within ``timeout_s``, stopping early at 0."""
    low, deadline = store_used_mb(), time.monotonic() + timeout_s
    while low > 0 and time.monotonic() < deadline:
        time.sleep(0.5)
        low = min(low, store_used_mb())
    return low


#: another Ray instance on this machine (an embedded cluster of another process): Ray's own
#: address discovery, used when no address is given, finds two and refuses
OTHER_RAY = textwrap.dedent("""
    import sys, ray
    ray.init(address="local", include_dashboard=False, num_cpus=1, object_store_memory=80 * 2**20, log_to_driver=False)
    print(ray.get_runtime_context().gcs_address, flush=True)
    sys.stdin.read()  # until the test closes our stdin
""")


def test_the_object_store_reading_asks_this_drivers_cluster_beside_another_ray_on_the_machine(
    ray_cluster, tmp_path, monkeypatch
):
    """Ray's address discovery, used when no address is given, picks "the latest cluster" of the
    machine's or refuses ("Found multiple active Ray instances"): the reading names this driver's."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER_RAY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert ":" in other.stdout.readline(), "the other process did not start its Ray"
        import numpy as np
        import ray

        held = ray.put(np.ones(24 * 2**20, np.uint8))  # 24 MiB in this cluster's store, none in the other's
        monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # no "latest cluster" record to fall back on, as in CI
        assert store_used_mb() >= 23, "the reading came from another Ray instance than this driver's"
        del held
    finally:
        other.stdin.close()
        try:
            other.wait(timeout=60)
        except subprocess.TimeoutExpired:
            other.kill()
            other.wait(timeout=30)


def hybridload_threads():
    """hybridload's threads, less the process-wide I/O pool (one per process, shared by every
    loader, like the Ray connection: it is not a loader's to stop; bounded by io_pool_bounded)."""
    return sorted(
        t.name
        for t in threading.enumerate()
        if t.name.startswith("hybridload") and not t.name.startswith("hybridload-io")
    )


def test_io_pool_is_one_bounded_pool_per_process():
    from hybridload.sources._reads import POOL_THREADS, io_pool

    assert io_pool() is io_pool()
    io_threads = [t for t in threading.enumerate() if t.name.startswith("hybridload-io")]
    assert len(io_threads) <= POOL_THREADS


# Stated bound: after the first epochs warm the allocators, host RSS may not grow by more
# than 64 MiB over the next 48 epochs (one batch here is 2 x 3 x 64 x 64 bytes, so any
# per-batch leak over 1,200+ batches would show), and the object store returns to < 8 MiB.
RSS_GROWTH_MB = 64


@pytest.mark.parametrize("lane", ["inprocess", "ray"])
def test_fifty_epochs_keep_memory_actors_and_threads_flat(photo_root, lane, request):
    policy = (
        LoaderPolicy(cpu_actors=0, threads=2)
        if lane == "inprocess"
        else LoaderPolicy(ray_address="embedded", cpu_actors=2, reserve_local_cpus=1)
    )
    if lane == "ray":
        request.getfixturevalue("ray_cluster")
    src = sources.ImageFolder(photo_root)
    with HybridLoader(src, REC, 16, policy=policy) as ld:
        rss, actors, threads, store = {}, {}, {}, {}
        for epoch in range(50):
            ld.set_epoch(epoch)
            for _ in ld:
                pass
            if epoch in (1, 49):
                gc.collect()
                rss[epoch], threads[epoch] = rss_mb(), hybridload_threads()
                if lane == "ray":
                    actors[epoch] = len(alive_actors())
                    store[epoch] = settled_store_mb()
        assert rss[49] - rss[1] < RSS_GROWTH_MB, rss
        assert threads[49] == threads[1]
        if lane == "ray":
            assert actors[49] == actors[1] == 2
            assert store[49] < 8, store
        request.node.user_properties.append(("memory", {"rss_mb": rss, "store_mb": store}))


def test_a_consumer_that_stops_reading_does_not_grow_memory_on_the_ray_lane(ray_cluster, photo_root):
    src = sources.ImageFolder(photo_root)
    with HybridLoader(
        src, REC, 4, policy=LoaderPolicy(ray_address="embedded", cpu_actors=2, reserve_local_cpus=1, window=3)
    ) as ld:
        it = iter(ld)
        next(it)
        time.sleep(2.0)
        assert ld.stats()["images"] <= 4 * (1 + 3)
        assert it.buffered() <= 3


def test_keyboard_interrupt_in_the_training_loop_leaves_nothing_behind(photo_root):
    src = sources.ImageFolder(photo_root)
    with pytest.raises(KeyboardInterrupt):
        with HybridLoader(src, REC, 4, policy=LoaderPolicy(mode="split", gpu_share=0.5, cpu_actors=0)) as ld:
            for k, _ in enumerate(ld):
                if k == 2:
                    raise KeyboardInterrupt
    assert ld._lanes == [] and hybridload_threads() == []


def test_keyboard_interrupt_and_exit_leave_no_actors(ray_cluster, photo_root):
    address = ray_cluster[0].address
    script = textwrap.dedent(f"""
        from hybridload import HybridLoader, LoaderPolicy, recipe, sources
        ld = HybridLoader(sources.ImageFolder({photo_root!r}), recipe.imagenet_train(48), 4,
                          policy=LoaderPolicy(cpu_actors=2, ray_address={address!r}))
        for k, batch in enumerate(ld):
            if k == 2:
                print("INTERRUPTING", flush=True)
                raise KeyboardInterrupt
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert "INTERRUPTING" in proc.stdout and "KeyboardInterrupt" in proc.stderr
    deadline = time.monotonic() + 30
    while alive_actors() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert alive_actors() == []
