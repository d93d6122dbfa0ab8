"""The Ray CPU lane on a simulated 3-node cluster (head = trainer + 2 worker nodes, loopback)."""

import gc
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from hybridload import HybridLoader, LoaderPolicy, recipe, sources

from support.ray_fixtures import alive_actors
from support.streams import free_port, run_ranks
from support.streams import stream as _stream


def digest_stream(loader, epochs=(0, 1)):
    return _stream(loader, epochs)


REC = recipe.imagenet_train(48)


@pytest.fixture
def cluster(ray_cluster):
    return ray_cluster


def wait_no_actors(timeout=30):
    deadline = time.monotonic() + timeout
    while alive_actors() and time.monotonic() < deadline:
        time.sleep(0.5)
    return alive_actors()


def test_remote_first_places_actors_off_the_trainer_node_and_keeps_its_cpus(cluster, photo_root):
    import ray

    trainer = ray.get_runtime_context().get_node_id()
    ld = HybridLoader(
        sources.ImageFolder(photo_root),
        REC,
        8,
        policy=LoaderPolicy(ray_address="embedded", placement="remote-first", reserve_local_cpus=2),
        return_indices=True,
    )
    try:
        next(iter(ld))
        lane = ld._lanes[0]
        assert len(lane.actors) == 2
        assert trainer not in lane.nodes and len(set(lane.nodes)) == 2
        # the trainer node's CPUs stay free for the training process
        avail = ray.available_resources()
        head = [n for n in ray.nodes() if n["NodeID"] == trainer][0]
        assert head["Resources"]["CPU"] == 2
        assert avail.get("CPU", 0) >= 2
    finally:
        ld.close()
    assert wait_no_actors() == []


def test_local_placement_uses_the_trainer_node_less_its_reserve(cluster, photo_root):
    import ray

    trainer = ray.get_runtime_context().get_node_id()
    with HybridLoader(
        sources.ImageFolder(photo_root),
        REC,
        8,
        policy=LoaderPolicy(ray_address="embedded", placement="local", reserve_local_cpus=1),
    ) as ld:
        next(iter(ld))
        assert ld._lanes[0].nodes == [trainer]


def test_too_many_actors_under_on_no_actors_raise_is_a_clear_error(cluster, photo_root):
    from hybridload.errors import NoActorsError

    with pytest.raises(NoActorsError, match="cpu_actors=9 but rank 0 has 3 CPU slots"):
        with HybridLoader(
            sources.ImageFolder(photo_root),
            REC,
            8,
            policy=LoaderPolicy(ray_address="embedded", cpu_actors=9, reserve_local_cpus=1, on_no_actors="raise"),
        ) as ld:
            next(iter(ld))
    assert wait_no_actors() == []


@pytest.mark.parametrize("ship_bytes", [False, True])
def test_ray_lane_stream_equals_in_process_stream_bit_for_bit(cluster, photo_root, ship_bytes):
    src = sources.ImageFolder(photo_root)
    with HybridLoader(src, REC, 7, policy=LoaderPolicy(cpu_actors=0, threads=2), seed=5, return_indices=True) as local:
        expected = digest_stream(local)
    with HybridLoader(
        src,
        REC,
        7,
        policy=LoaderPolicy(ray_address="embedded", cpu_actors=3, reserve_local_cpus=1, ship_bytes=ship_bytes),
        seed=5,
        return_indices=True,
    ) as remote:
        got = digest_stream(remote)
        assert remote.stats()["lanes"]["ray"]["images"] == 120
    assert got == expected


def test_ship_bytes_reads_off_the_submitting_thread_and_a_failed_read_is_reported_once(cluster, photo_root):
    """``submit`` returns while the batch's reads block; the batch then comes out as the
    in-process lane makes it, and a read that fails reaches ``done`` once."""
    import numpy as np
    import torch

    from hybridload.lanes._base import BatchTask
    from hybridload.lanes._local.inprocess import InProcessLane
    from hybridload.raycluster import PlacementRules
    from hybridload.lanes._ray import PoolConfig, RayLane

    class GatedFolder(sources.ImageFolder):  # local: Ray sends it by value; an actor never reads it
        """A folder on a filesystem that hangs until the test opens ``gate``; sample 5's read fails."""

        def read(self, ref):
            if ref.index == 5:
                raise RuntimeError(f"the disk holding sample {ref.index} is gone")
            if not self.gate.wait(60):
                raise TimeoutError("the test never opened the gate")
            return super().read(ref)

        def __getstate__(self):
            return {k: v for k, v in self.__dict__.items() if k != "gate"}

    src = GatedFolder(photo_root)
    src.gate = threading.Event()
    pool = PoolConfig(
        rules=PlacementRules(reserve_local_cpus=1, cpu_actors=1), ray_address="embedded", on_no_actors="raise"
    )
    lane = RayLane(src, REC, pool, ship_bytes=True)
    got: dict = {}
    arrived = threading.Condition()

    def done(task, out):
        with arrived:
            got.setdefault(task.seq, []).append(out)
            arrived.notify_all()

    try:
        slow, bad = (
            BatchTask(0, 0, np.arange(4), seed=4),
            BatchTask(1, 0, np.arange(5, 9), seed=4),
        )  # 5 first: fails at once
        t0 = time.perf_counter()
        lane.submit(slow, done)
        lane.submit(bad, done)
        assert time.perf_counter() - t0 < 5.0  # the reads wait for the gate (60 s): not on this thread
        with arrived:
            assert arrived.wait_for(lambda: 1 in got, 60)
            assert 0 not in got  # still reading
        src.gate.set()
        with arrived:
            assert arrived.wait_for(lambda: 0 in got, 120)
        time.sleep(0.5)  # room for a second report, were there one
        assert len(got[1]) == 1 and isinstance(got[1][0], RuntimeError) and "sample 5" in str(got[1][0])
        assert len(got[0]) == 1 and lane.in_flight == 0
        local = InProcessLane(sources.ImageFolder(photo_root), REC, threads=1)
        want = local.run_batch(slow)
        local.close()
        assert torch.equal(got[0][0].images, want.images) and got[0][0].labels.tolist() == want.labels.tolist()
    finally:
        src.gate.set()
        lane.close()
    assert lane._readers._shutdown  # the reader threads go with the lane


def test_sample_errors_from_actors_name_index_path_and_stage(cluster, photo_root, bad_files):
    from hybridload.errors import SampleError

    paths = list(sources.ImageFolder(photo_root).paths[:8])
    paths[6] = bad_files["corrupt"]
    with HybridLoader(
        sources.FileList(paths, list(range(8))),
        REC,
        2,
        shuffle=False,
        policy=LoaderPolicy(ray_address="embedded", cpu_actors=2),
    ) as ld:
        got = []
        with pytest.raises(SampleError) as info:
            for _images, labels in ld:
                got.append(labels.tolist())
    assert got == [[0, 1], [2, 3], [4, 5]]
    assert (info.value.index, info.value.path, info.value.stage) == (6, bad_files["corrupt"], "Decode")


def test_close_gc_and_interpreter_exit_leave_no_actors(cluster, photo_root):
    src = sources.ImageFolder(photo_root)
    ld = HybridLoader(src, REC, 8, policy=LoaderPolicy(ray_address="embedded", cpu_actors=2))
    next(iter(ld))
    assert len(alive_actors()) == 2
    ld.close()
    assert wait_no_actors() == []

    ld = HybridLoader(src, REC, 8, policy=LoaderPolicy(ray_address="embedded", cpu_actors=2))
    next(iter(ld))
    assert len(alive_actors()) == 2
    del ld
    gc.collect()
    assert wait_no_actors() == []

    address = cluster[0].address
    script = textwrap.dedent(f"""
        import ray
        from hybridload import HybridLoader, LoaderPolicy, recipe, sources
        ld = HybridLoader(sources.ImageFolder({photo_root!r}), recipe.imagenet_train(48), 8,
                          policy=LoaderPolicy(cpu_actors=2, ray_address={address!r}))
        next(iter(ld))
        print("ACTORS_STARTED", flush=True)
        # exit without close()
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert "ACTORS_STARTED" in proc.stdout, proc.stderr[-3000:]
    assert wait_no_actors() == []


def _ddp_rank(rank, port, address, root, out):
    import json
    from datetime import timedelta

    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=120)
    )
    try:
        ld = HybridLoader(
            sources.ImageFolder(root),
            REC,
            6,
            seed=3,
            return_indices=True,
            policy=LoaderPolicy(ray_address=address, reserve_local_cpus=2),
        )
        epochs = []
        for epoch in range(2):
            ld.set_epoch(epoch)
            mine = [idx.tolist() for _im, _lab, idx in ld]
            gathered = [None, None]
            dist.all_gather_object(gathered, mine)
            epochs.append(gathered)
        nodes = [None, None]
        dist.all_gather_object(nodes, ld._lanes[0].nodes)
        ld.close()
        if rank == 0:
            json.dump({"epochs": epochs, "nodes": nodes}, open(out, "w"))
    finally:
        dist.destroy_process_group()


def test_two_ddp_ranks_over_the_cluster_cover_the_dataset_once_per_epoch(cluster, photo_root, tmp_path):
    import json

    port = free_port()
    out = str(tmp_path / "ddp.json")
    codes = run_ranks(_ddp_rank, lambda r: (r, port, cluster[0].address, photo_root, out), 2, timeout_s=240)
    assert codes == [0, 0]
    result = json.load(open(out))
    for gathered in result["epochs"]:
        assert len(gathered[0]) == len(gathered[1])
        flat = sorted(i for rank in gathered for b in rank for i in b)
        assert flat == list(range(60))
    # a fair share each: one remote worker node per rank, disjoint
    n0, n1 = result["nodes"]
    assert len(n0) == len(n1) == 1 and set(n0).isdisjoint(n1)
    assert wait_no_actors() == []


def test_a_ray_batch_is_copied_off_rays_callback_thread(cluster, photo_root):
    """The copy of a finished batch out of the object store (~10 MB for 64 images at 224 px) runs
    on the lane's converter threads: Ray's callback thread, which every other Ray callback of the
    process waits behind, only hands the result on (before: the copy ran there, and ``done``
    was called there)."""
    import numpy as np
    import torch

    from hybridload.lanes._base import BatchTask
    from hybridload.lanes._local.inprocess import InProcessLane
    from hybridload.raycluster import PlacementRules
    from hybridload.lanes._ray import PoolConfig, RayLane

    lane = RayLane(
        sources.ImageFolder(photo_root),
        REC,
        PoolConfig(
            rules=PlacementRules(reserve_local_cpus=1, cpu_actors=1), ray_address="embedded", on_no_actors="raise"
        ),
    )
    got, arrived = [], threading.Event()

    def done(task, out):
        got.append((threading.current_thread().name, out))
        arrived.set()

    try:
        task = BatchTask(0, 0, np.arange(4), seed=4)
        lane.submit(task, done)
        assert arrived.wait(120), "no result within 120 s"
        measured = lane.run_batch(BatchTask(1, 0, np.arange(4), seed=4))  # run_batch converts on its caller's thread
    finally:
        lane.close()
    ((thread, out),) = got
    assert thread.startswith("hybridload-ray-convert"), thread
    local = InProcessLane(sources.ImageFolder(photo_root), REC, threads=1)
    try:
        want = local.run_batch(task)
    finally:
        local.close()
    assert torch.equal(out.images, want.images) and torch.equal(measured.images, want.images)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads a thread's page faults from /proc")
def test_ray_batches_are_copied_into_kept_buffers_never_over_a_held_batch(cluster):
    """The converter thread copied each batch out of the object store into a fresh 32 x 3 x 224 x
    224 tensor (1,176 new pages a batch); it writes kept buffers again instead, and only once
    nothing can read their batch: batches the consumer holds keep their pixels, and once the
    consumer drops each batch the thread faults in under a quarter of one batch's pages per batch."""
    import numpy as np
    import torch

    from hybridload.lanes._base import BatchTask
    from hybridload.lanes._local.inprocess import InProcessLane
    from hybridload.lanes._ray import PoolConfig, RayLane
    from hybridload.raycluster import PlacementRules
    from support.pictures import Pictures, minor_faults

    src, rec, pages = sources.TorchDataset(Pictures()), recipe.imagenet_eval(224), 32 * 3 * 224 * 224 // 4096
    tasks = [BatchTask(k, 0, np.arange(32 * k, 32 * k + 32) % 96, seed=4) for k in range(12)]
    lane = RayLane(
        src,
        rec,
        PoolConfig(
            rules=PlacementRules(reserve_local_cpus=1, cpu_actors=1), ray_address="embedded", on_no_actors="raise"
        ),
    )
    try:

        def run(task):
            got, arrived = [], threading.Event()
            lane.submit(task, lambda t, out: (got.append(out), arrived.set()))
            assert arrived.wait(120), f"batch {task.seq}: no result within 120 s"
            assert not isinstance(got[0], BaseException), got[0]
            return got[0].images

        held = [run(t) for t in tasks[:6]]  # all held at once
        (copier,) = [t for t in threading.enumerate() if t.name.startswith("hybridload-ray-convert")]
        for task in tasks[6:8]:
            run(task)  # dropped at once: warm buffers
        before = minor_faults(copier.native_id)
        for task in tasks[8:]:
            run(task)
        per_batch = (minor_faults(copier.native_id) - before) / len(tasks[8:])
    finally:
        lane.close()
    local = InProcessLane(src, rec, threads=1)
    try:
        for task, images in zip(tasks, held):
            assert torch.equal(images, local.run_batch(task).images), f"held batch {task.seq} was overwritten"
    finally:
        local.close()
    assert per_batch < pages / 4, f"the converter thread faulted in {per_batch:.0f} pages a batch (a batch is {pages})"


def test_a_ray_actor_times_its_reads_and_its_decoding_apart_and_the_trace_shows_both(cluster, photo_root, tmp_path):
    """The actor measures the wait for its samples' bytes and its decode+augment; both travel back
    with the batch and the trace draws them as ``read N`` then ``decode N`` on the actor's row."""
    import json
    from collections import defaultdict

    path = tmp_path / "ray.json"
    policy = LoaderPolicy(ray_address="embedded", placement="remote-first", reserve_local_cpus=2)
    with HybridLoader(sources.ImageFolder(photo_root), REC, 8, policy=policy, shuffle=False) as ld:
        with ld.trace(path):
            n = sum(1 for _ in ld)
    events = json.loads(path.read_text())["traceEvents"]
    rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    copies = defaultdict(dict)
    for e in events:
        if e["ph"] == "X" and e["cat"] == "work" and e["args"]["lane"] == "ray":
            copies[(e["pid"], e["tid"], e["args"]["seq"])][e["args"]["stage"]] = e
    assert len({seq for _p, _t, seq in copies}) == n, sorted(copies)
    for (pid, tid, seq), c in copies.items():
        assert rows[(pid, tid)].startswith("ray actor "), rows[(pid, tid)]
        assert set(c) == {"read", "decode+augment"}, (seq, c)
        assert c["read"]["ts"] + c["read"]["dur"] <= c["decode+augment"]["ts"] and c["decode+augment"]["dur"] > 0, c
