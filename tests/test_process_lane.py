"""The process lane: the same stream as the in-process lane, errors as exceptions, clean shutdown."""

import os
import signal
import sys
import threading
import time

import numpy as np
import pytest
import torch

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import SampleError, WorkerLost
from hybridload.lanes._base import BatchTask
from hybridload.lanes._local.process import ProcessLane
from support.pictures import kept_buffer_pages, minor_faults, picture_loader
from support.streams import check_the_newer_pass_supersedes_the_older, local_lane_streams

REC = recipe.imagenet_train(48)


@pytest.mark.parametrize("start_method", ["fork", "forkserver"])
def test_process_lane_stream_is_bit_identical_to_the_in_process_lane(photo_root, start_method):
    runs, lanes = local_lane_streams(
        sources.ImageFolder(photo_root), REC, 7, seed=5, epochs=(0, 1), threads=2, start_method=start_method
    )
    assert {w: d.startswith("process lane") for w, d in lanes.items()} == {"threads": False, "processes": True}
    assert f"({start_method})" in lanes["processes"]
    assert runs["processes"] == runs["threads"] and len(runs["threads"]) == 18


def test_a_bad_sample_comes_back_as_sample_error_with_its_fields(photo_root, bad_files):
    src = sources.FileList([os.path.join(photo_root, p) for p in _some(photo_root, 3)] + [bad_files["truncated"]])
    lane = ProcessLane(src, REC, workers=1, batch_size=4)
    try:
        with pytest.raises(SampleError) as info:
            lane.run_batch(BatchTask(0, 0, np.arange(4)))
        assert info.value.index == 3 and info.value.path == bad_files["truncated"] and info.value.stage
        assert lane.run_batch(BatchTask(1, 0, np.arange(3))).images.shape[0] == 3  # the worker carries on
    finally:
        lane.close()


def test_a_dead_worker_ends_its_batch_in_worker_lost_and_is_replaced(photo_root):
    lane = ProcessLane(sources.ImageFolder(photo_root), REC, workers=1, batch_size=4)
    try:
        lane.run_batch(BatchTask(0, 0, np.arange(4)))
        got, ev = [], threading.Event()
        os.kill(lane._procs[0].pid, signal.SIGKILL)
        lane.submit(BatchTask(1, 0, np.arange(4)), lambda t, out: (got.append(out), ev.set()))
        assert ev.wait(30), "no report for the dead worker's batch"
        assert isinstance(got[0], WorkerLost) and "died" in str(got[0])
        assert lane.run_batch(BatchTask(2, 0, np.arange(4))).images.shape[0] == 4
    finally:
        lane.close()


def test_close_stops_every_worker_and_frees_the_slots(photo_root):
    lane = ProcessLane(sources.ImageFolder(photo_root), REC, workers=2, batch_size=4)
    lane.run_batch(BatchTask(0, 0, np.arange(4)))
    procs, names = list(lane._procs), [s.name for s in lane._shm]
    lane.close()
    lane.close()  # idempotent
    assert all(not p.is_alive() for p in procs)
    assert not any(os.path.exists(f"/dev/shm/{n}") for n in names)
    with pytest.raises(RuntimeError, match="closed"):
        lane.submit(BatchTask(1, 0, np.arange(4)), lambda t, o: None)


def _some(root, n):
    return sorted(
        os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs if f.endswith(".jpg")
    )[:n]


@pytest.mark.parametrize("start_method", ["auto", "forkserver"])
def test_a_script_without_a_main_guard_runs_with_fork_and_is_told_to_add_one_otherwise(
    photo_root, tmp_path, start_method
):
    """Forked workers (the default on Linux, as torch's DataLoader) import nothing, so a script with
    no ``if __name__ == "__main__":`` guard runs; forkserver workers import the main script, which
    kills them, and the error says what to write."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(
        "from hybridload import HybridLoader, LoaderPolicy, recipe, sources\n"
        f"src = sources.ImageFolder({str(photo_root)!r})\n"
        f"policy = LoaderPolicy(local_workers='processes', threads=1, start_method={start_method!r})\n"
        "with HybridLoader(src, recipe.imagenet_train(32), 4, policy=policy, device='cpu') as ld:\n"
        "    images = next(iter(ld))[0]\n"
        "    print(ld.describe_lanes(), tuple(images.shape))\n"
    )
    # a guard against a hang, not a speed bound: forkserver starts 4 interpreters (the server and 3
    # workers, each running the script), CPU-bound: 4.6 s on 2 cores at load 10, 57 s at load 20;
    # 120 s ran out once at load 30-50
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    if start_method == "auto":
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "process lane: 1 worker processes (fork) (4, 3, 32, 32)"
        return
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert "WorkerLost" in last and 'if __name__ == "__main__":' in last and 'local_workers="threads"' in last
    assert 'start_method="fork"' in last


class IoPoolSource(sources.ImageFolder):
    """Reads through the process-wide I/O pool, as remote sources do."""

    def read(self, ref):
        from hybridload.sources._reads import io_pool

        return io_pool().submit(super().read, ref).result(timeout=60)


def test_a_forked_worker_does_not_inherit_locks_held_by_parent_threads(photo_root):
    """A fork while another thread holds the I/O pool's lock (or a shard cache's) must not leave
    the worker waiting on it: the child gets fresh ones."""
    from hybridload.sources import _reads as reads
    from hybridload.sources._tar import shard_cache

    cache = shard_cache.ShardCache(lambda url: b"x", capacity=1)
    held, release = threading.Event(), threading.Event()

    def hold():
        with reads._lock, cache._lock:
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(10)
    lane = ProcessLane(IoPoolSource(photo_root), REC, workers=1, batch_size=4, start_method="fork")
    try:
        got, ev = [], threading.Event()
        lane.submit(BatchTask(0, 0, np.arange(4)), lambda t, out: (got.append(out), ev.set()))
        assert ev.wait(60), "the forked worker is stuck on a lock its parent's thread held at the fork"
        assert not isinstance(got[0], BaseException), got[0]
        assert got[0].images.shape[0] == 4
    finally:
        release.set()
        lane.close()
        holder.join(10)


class SlowSource(sources.ImageFolder):
    """Each read takes 50 ms: a given-up pass still has its batches running when the next starts."""

    def read(self, ref):
        import time

        time.sleep(0.05)
        return super().read(ref)


def test_a_pass_given_up_mid_epoch_leaves_the_next_pass_whole(photo_root):
    """The slots an abandoned pass's batches still hold are not the next pass's error: its tasks
    wait for them (before: 'more than N tasks in flight' twice, and the lane broke)."""
    from hybridload import HybridLoader, LoaderPolicy

    policy = LoaderPolicy(cpu_actors=0, threads=2, local_workers="processes", start_method="fork")
    with HybridLoader(
        SlowSource(photo_root), recipe.imagenet_train(32), 4, seed=0, return_indices=True, policy=policy
    ) as ld:
        first = iter(ld)
        next(first)  # the pass runs, its window fills the slots
        second = [idx.tolist() for _i, _l, idx in ld]  # a new pass at once: the first one is given up
        stats = ld.stats()
        want = [b.tolist() for b in ld.batch_indices(stats["epoch"])]
    assert sorted(i for b in second for i in b) == list(range(60))  # the whole epoch, each sample once
    assert second == want
    assert stats["lanes"]["processes"]["batches"] >= 15 and not stats.get("broken")


def test_a_task_started_while_a_dead_worker_is_replaced_reaches_a_live_worker(photo_root):
    """Kill a worker while it holds batches, and submit one more while the lane is handling the
    death (a slow log handler holds it there): the new batch must reach a live worker and come
    back, not sit in the dead worker's queue until the batch timeout; the dead worker's batches
    end in WorkerLost. Before: the replacement was published after the dead worker's table was
    cleared, and the new task went to the old queue."""
    import logging
    import time

    lane = ProcessLane(SlowSource(photo_root), recipe.imagenet_eval(32), workers=2, batch_size=2)
    in_handler = threading.Event()

    class SlowHandler(logging.Handler):  # a slow log handler (a network one, a loaded machine)
        def emit(self, record):
            if "died" in record.getMessage():
                in_handler.set()
                time.sleep(1.0)

    handler = SlowHandler(logging.WARNING)
    logger = logging.getLogger("hybridload.lanes._local.process")
    logger.addHandler(handler)
    reports: dict[int, object] = {}
    arrived = threading.Condition()

    def done(task, out):
        with arrived:
            reports[task.seq] = out
            arrived.notify_all()

    try:
        lane.run_batch(BatchTask(0, 0, np.arange(2)))  # both workers up
        for k in range(1, 4):  # load: batches on both workers
            lane.submit(BatchTask(k, 0, np.array([k, k + 1])), done)
        os.kill(lane._procs[0].pid, signal.SIGKILL)
        assert in_handler.wait(30), "the lane did not notice its worker's death within 30 s"
        lane.submit(BatchTask(9, 0, np.array([9, 10])), done)
        with arrived:
            assert arrived.wait_for(lambda: len(reports) == 4, timeout=20), (
                f"batches {sorted({1, 2, 3, 9} - set(reports))} never came back"
            )
    finally:
        logger.removeHandler(handler)
        lane.close()
    assert reports[9].indices.tolist() == [9, 10]
    assert all(
        isinstance(out, WorkerLost) or out.indices.tolist() == [k, k + 1] for k, out in reports.items() if k != 9
    )


def test_shared_memory_slots_hold_a_uint8_batch_not_four_times_it(photo_root):
    """The workers write uint8 batches (the loader normalizes on its device): each slot is one
    such batch in /dev/shm (before: sized for float32, 4x), and a full batch still fits it."""
    rec = recipe.imagenet_train(48, normalize=True)  # Normalize runs in the loader, not in the workers
    lane = ProcessLane(sources.ImageFolder(photo_root), rec, workers=1, batch_size=4)
    try:
        batch_bytes = 4 * 3 * 48 * 48
        assert [os.stat(f"/dev/shm/{s.name}").st_size for s in lane._shm] == [batch_bytes] * lane.slots
        out = lane.run_batch(BatchTask(0, 0, np.arange(4)))
        assert out.images.dtype == torch.uint8 and out.images.shape == (4, 3, 48, 48)
    finally:
        lane.close()


class HugeErrorSource(sources.ImageFolder):
    """Sample 1's read fails with a 1 MB message: its report is far larger than a pipe holds
    (64 KiB), so the worker writes it in pieces while the parent reads."""

    def read(self, ref):
        if ref.index == 1:
            raise RuntimeError("x" * 1_000_000)
        return super().read(ref)


def _blocked_in_write(pid: int) -> bool:
    """Whether a thread of ``pid`` sits in the write system call (x86-64: number 1), e.g. on a full pipe."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                if f.read().split(" ", 1)[0] == "1":
                    return True
        except OSError:
            continue
    return False


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="reads the write system call's number (x86-64) in /proc")
def test_a_worker_killed_halfway_through_writing_its_result_never_wedges_the_lane(photo_root):
    """A worker SIGKILLed at any moment, even halfway through writing a result to the parent, must
    not wedge the lane: its batch ends in WorkerLost and the other workers' batches and the
    replacement's still come back. Before: every worker wrote to one shared results queue, under
    a lock shared by all writers; a worker killed while writing left that lock held (no other
    worker's result ever arrived: the replacement sat idle, its result stuck behind the lock) and
    half a message in the pipe (the parent's read of it waited for ever)."""
    lane = ProcessLane(HugeErrorSource(photo_root), recipe.imagenet_eval(32), workers=2, batch_size=1)
    gate, first_in, reports = threading.Event(), threading.Event(), {}
    arrived = threading.Condition()

    def done(task, out):
        with arrived:
            reports[task.seq] = out
            arrived.notify_all()

    def hold(task, out):  # the parent stops reading results while this runs (the collector calls it)
        done(task, out)
        first_in.set()
        gate.wait(30)

    try:
        lane.run_batch(BatchTask(0, 0, np.array([0])))
        lane.submit(BatchTask(1, 0, np.array([0])), hold)
        assert first_in.wait(30), "batch 1 never came back"
        lane.submit(BatchTask(2, 0, np.array([1])), done)  # its 1 MB error report fills the pipe
        writer = next(p for w, p in enumerate(lane._procs) if lane._inflight[w])
        deadline = time.monotonic() + 30
        while not _blocked_in_write(writer.pid):
            assert time.monotonic() < deadline, "the worker never blocked writing its 1 MB report"
            time.sleep(0.01)
        os.kill(writer.pid, signal.SIGKILL)
        writer.join(10)
        gate.set()
        with arrived:
            assert arrived.wait_for(lambda: 2 in reports, timeout=20), "the killed worker's batch never came back"
        for k in range(3, 9):  # on the other worker and the replacement
            lane.submit(BatchTask(k, 0, np.array([k])), done)
        with arrived:
            assert arrived.wait_for(lambda: len(reports) == 8, timeout=20), (
                f"batches {sorted(set(range(1, 9)) - set(reports))} never came back: the lane is wedged"
            )
    finally:
        gate.set()
        lane.close()
    assert isinstance(reports[2], WorkerLost), reports[2]
    assert all(reports[k].indices.tolist() == [k] for k in range(3, 9))


def test_a_held_batch_is_never_overwritten_by_a_later_one():
    """Batches the consumer keeps (all of two passes) keep their pixels: the lane copies each batch
    out of its shared-memory slot into a kept buffer, lent again only once nothing can read it."""
    from hybridload.lanes._cpu_job import process_batch

    with picture_loader(8, local_workers="processes", return_indices=True) as ld:
        held = []
        for epoch in range(2):
            ld.set_epoch(epoch)
            held += [(epoch, images, idx) for images, _labels, idx in ld]
        assert ld.describe_lanes().startswith("process lane"), ld.describe_lanes()
        for epoch, images, idx in held:
            want = process_batch(ld.source, ld.recipe, idx.numpy(), 3, epoch).images
            assert torch.equal(images, want), f"epoch {epoch} batch {idx.tolist()} was overwritten"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads a thread's page faults from /proc")
def test_the_trainer_copies_each_batch_into_pages_already_mapped():
    """The trainer's thread that copies a batch out of its slot wrote into a fresh 32 x 3 x 224 x 224
    tensor each batch (1,176 new pages, faulted in on the trainer's side); kept buffers are written
    again instead. Its faults over a pass after two warm ones: under a quarter of one batch's pages
    per batch."""
    pages = 32 * 3 * 224 * 224 // 4096
    with picture_loader(32, local_workers="processes") as ld:
        for _ in range(2):
            for _ in ld:
                pass
        (copier,) = [t for t in threading.enumerate() if t.name == "hybridload-process-lane"]
        before, kept = minor_faults(copier.native_id), kept_buffer_pages(ld)
        batches = sum(1 for _ in ld)
        grown = kept_buffer_pages(ld) - kept  # a buffer kept on this pass is mapped once, then kept
        per_batch = (minor_faults(copier.native_id) - before - grown) / batches
    assert per_batch < pages / 4, f"the copying thread faulted in {per_batch:.0f} pages a batch (a batch is {pages})"


def test_a_batch_size_past_the_dataset_gives_one_batch_of_all_on_the_process_lane(photo_root):
    """The slots are sized by the batch a lane can receive, the source's samples at most: a batch size of
    2**40 (torch's meaning: one batch of all) asked the OS for 2**40 images of shared memory before."""
    src = sources.ImageFolder(photo_root)
    policy = LoaderPolicy(cpu_actors=0, local_workers="processes", threads=1)
    with HybridLoader(src, recipe.imagenet_eval(16), 2**40, policy=policy, shuffle=False) as ld:
        (images, labels), *rest = list(ld)
    assert not rest and images.shape == (60, 3, 16, 16) and len(labels) == 60
    with pytest.raises(ValueError, match="HybridLoader: batch_size must be at most 2\\*\\*63 - 1"):
        HybridLoader(src, recipe.imagenet_eval(16), 2**63, policy=policy)


def test_of_two_threads_starting_passes_at_once_the_newer_supersedes_the_older_on_processes(photo_root):
    """The older pass once raised "next() after close()" here though nobody called close(); the lanes
    are built once whichever thread starts first (each thread built its own worker processes before)."""
    policy = LoaderPolicy(cpu_actors=0, local_workers="processes", threads=2)
    for _ in range(3):  # a fresh loader each time: the first iter() builds the lanes, also raced
        with HybridLoader(sources.ImageFolder(photo_root), recipe.imagenet_eval(16), 6, policy=policy) as ld:
            check_the_newer_pass_supersedes_the_older(ld, rounds=4)
            assert ld.describe_lanes().count("process lane") == 1, ld.describe_lanes()
