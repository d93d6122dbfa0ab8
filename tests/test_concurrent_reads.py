"""Reads that hide storage latency: a worker reads a batch's samples concurrently, with the
same pixels and per-sample errors as one read after another, and the requests overlap."""

import os
import threading
import time
import uuid

import fsspec
import pytest

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import SampleError
from hybridload.lanes._cpu_job import process_batch
from support.slowfs import SlowMemoryFileSystem
from hybridload.sources._reads import ordered_reads, read_many

from support.streams import stream
from test_tarshards import folder, shard_dir  # noqa: F401  (fixtures)

REC = recipe.imagenet_train(48)
SLOW = {"latency_s": 0.01}


def to_memory(local_root: str) -> str:
    """Copy a local tree into memory:// (which slowmem:// shares); its root path."""
    base = f"/cr-{uuid.uuid4().hex[:8]}"
    fs = fsspec.filesystem("memory")
    for dirpath, _dirs, names in os.walk(local_root):
        for name in names:
            path = os.path.join(dirpath, name)
            fs.pipe_file(f"{base}/{os.path.relpath(path, local_root)}", open(path, "rb").read())
    return base


@pytest.fixture(scope="module")
def slow_root(photo_root):
    base = to_memory(photo_root)
    yield f"slowmem://{base}"
    fsspec.filesystem("memory").rm(base, recursive=True)


@pytest.fixture(scope="module")
def slow_shards(shard_dir):  # noqa: F811
    base = to_memory(str(shard_dir))
    yield f"slowmem://{base}/shard-{{000..002}}.tar"
    fsspec.filesystem("memory").rm(base, recursive=True)


def test_concurrent_reads_give_the_pixels_of_sequential_and_local_reads(slow_root, photo_root):
    local = sources.ImageFolder(photo_root)
    seq = sources.ImageFolder(slow_root, storage_options=SLOW, io_threads=1)
    conc = sources.ImageFolder(slow_root, storage_options=SLOW)
    assert (seq.io_threads, conc.io_threads, local.io_threads) == (1, 32, 1)
    idx = [5, 0, 59, 17, 33, 2, 41, 8]
    want = process_batch(local, REC, idx, seed=4, epoch=1)
    for src in (seq, conc):
        got = process_batch(src, REC, idx, seed=4, epoch=1)
        assert got.images.equal(want.images) and got.labels.tolist() == want.labels.tolist()


def test_concurrent_reads_overlap_their_requests_and_sequential_ones_do_not(slow_root, slow_shards):
    idx = list(range(16))
    for make in (
        lambda k: sources.ImageFolder(slow_root, storage_options=SLOW, io_threads=k),
        lambda k: sources.TarShards(slow_shards, storage_options=SLOW, io_threads=k),
    ):
        for k, overlap in ((1, False), (8, True)):
            src = make(k)
            SlowMemoryFileSystem.reset_counts()
            process_batch(src, REC, idx, seed=0, epoch=0)
            counts = SlowMemoryFileSystem.counts()
            assert counts["requests"] == 16
            assert (counts["max_in_flight"] > 1) is overlap, (k, counts)
            assert counts["max_in_flight"] <= k


def test_a_loader_over_slow_storage_streams_what_it_streams_over_local_files(slow_root, photo_root):
    policy = LoaderPolicy(cpu_actors=0, threads=2)
    with (
        HybridLoader(
            sources.ImageFolder(slow_root, storage_options=SLOW), REC, 7, seed=3, return_indices=True, policy=policy
        ) as a,
        HybridLoader(sources.ImageFolder(photo_root), REC, 7, seed=3, return_indices=True, policy=policy) as b,
    ):
        assert stream(a, (0, 1)) == stream(b, (0, 1))


def test_a_missing_sample_among_concurrent_reads_is_skipped_or_raised_as_when_sequential(slow_root):
    conc = sources.ImageFolder(slow_root, storage_options=SLOW)
    paths = list(conc.paths[:4])
    paths[2] = paths[2].replace(".jpg", "-missing.jpg")
    for k in (1, 8):
        fl = sources.FileList(paths, [0, 1, 2, 3], storage_options=SLOW, io_threads=k)
        res = process_batch(fl, REC, [0, 1, 2, 3], 0, 0, on_error="skip")
        assert [(s[0], s[1], s[2]) for s in res.skipped] == [(2, paths[2], "read")]
        assert res.labels.tolist() == [0, 1, 2, 3] and not res.images[2].any() and res.images[3].any()
        with pytest.raises(SampleError) as info:
            process_batch(fl, REC, [0, 1, 2, 3], 0, 0)
        assert (info.value.index, info.value.stage) == (2, "read")


def test_ordered_reads_yield_in_input_order_whatever_order_reads_finish_in():
    def read(i):
        time.sleep(0.002 * (10 - i))  # the first finishes last
        if i == 4:
            raise SampleError(i, f"x{i}", "read", "gone")
        return (i, i)

    out = list(ordered_reads(read, list(range(10)), width=10))
    assert [o if isinstance(o, tuple) else ("err", o.index) for o in out] == [
        (i, i) if i != 4 else ("err", 4) for i in range(10)
    ]


def test_ordered_reads_keep_at_most_width_in_flight():
    lock, state = threading.Lock(), {"now": 0, "max": 0}

    def read(i):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.01)
        with lock:
            state["now"] -= 1
        return (i, 0)

    assert [o[0] for o in ordered_reads(read, list(range(24)), width=3)] == list(range(24))
    assert 1 < state["max"] <= 3


def test_an_error_that_is_not_a_sample_error_is_raised_at_its_sample():
    def read(i):
        if i == 2:
            raise RuntimeError("bug")
        return (i, 0)

    it = ordered_reads(read, list(range(5)), width=4)
    assert [next(it)[0], next(it)[0]] == [0, 1]
    with pytest.raises(RuntimeError, match="bug"):
        next(it)


def test_read_many_falls_back_to_read_for_a_source_without_it(folder):  # noqa: F811
    class Bare:
        def read(self, ref):
            return folder.read(ref)

    refs = [folder.ref(i) for i in (3, 1)]
    assert list(read_many(Bare(), refs)) == [folder.read(r) for r in refs]


def test_io_threads_must_be_a_positive_int(photo_root):
    with pytest.raises(ValueError, match="io_threads must be None .* write e.g. io_threads=32"):
        sources.ImageFolder(photo_root, io_threads=0)


def test_closing_the_reads_early_starts_no_more_of_them():
    started = []

    def read(i):
        started.append(i)
        time.sleep(0.01)
        return (i, 0)

    it = ordered_reads(read, list(range(20)), width=2)
    assert next(it) == (0, 0)
    it.close()
    time.sleep(0.1)
    assert len(started) <= 4  # the first read, the ones in flight when closed; not the other 16


def test_the_in_process_lane_starts_a_queued_batchs_reads_when_it_accepts_the_batch(slow_root):
    """One batch waits behind the running ones with its reads under way, so a thread that
    finishes a batch does not then wait a round trip for the next one's first sample."""
    import threading

    from hybridload.lanes._base import BatchTask
    from hybridload.lanes._local.inprocess import InProcessLane

    src = sources.ImageFolder(slow_root, storage_options={"latency_s": 0.2})
    lane = InProcessLane(src, REC, threads=1)
    assert lane.slots == 2  # the running batch and one queued behind it
    done, results = threading.Event(), []

    def report(task, out):
        results.append((task.seq, out))
        if len(results) == 2:
            done.set()

    try:
        SlowMemoryFileSystem.reset_counts()
        lane.submit(BatchTask(seq=0, epoch=0, indices=[0, 1, 2, 3]), report)
        lane.submit(BatchTask(seq=1, epoch=0, indices=[4, 5, 6, 7]), report)
        time.sleep(0.1)  # the single thread is still waiting on batch 0's first round trip
        assert SlowMemoryFileSystem.counts()["max_in_flight"] == 8  # both batches' reads under way
        assert done.wait(30), "the lane did not finish two batches within 30 s"
    finally:
        lane.close()
    assert [s for s, _ in sorted(results, key=lambda r: r[0])] == [0, 1]
    assert all(not isinstance(out, BaseException) for _, out in results)
