"""Shard streaming (TarShards(read="shard")) over a slow fsspec filesystem: every sample once
per epoch per the sharding rules, a deterministic order, exact mid-epoch resume, the same
pixels as per-sample reads, and one request per shard instead of one per sample."""

import hashlib
import pickle

import fsspec
import pytest

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import ShardIndexError
from hybridload.lanes._cpu_job import process_batch
from hybridload.sampling._shard_order import ShardOrder
from support.slowfs import SlowMemoryFileSystem

from support.resume_helper import check_resume
from support.streams import local_lane_streams
from test_concurrent_reads import to_memory
from test_tarshards import folder, shard_dir, write_shard  # noqa: F401  (fixtures)

REC = recipe.imagenet_train(48)
SLOW = {"latency_s": 0.002}
POLICY = LoaderPolicy(cpu_actors=0, threads=2)


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory, folder):  # noqa: F811
    """The 60 photos as 10 shards of 6 in memory://, read through slowmem://: the pattern."""
    d = tmp_path_factory.mktemp("many")
    for s in range(10):
        write_shard(
            d / f"part-{s:02d}.tar",
            [
                m
                for i in range(6 * s, 6 * s + 6)
                for m in ((f"k{i:03d}.jpg", folder.read(folder.ref(i))[0]), (f"k{i:03d}.cls", str(i % 3).encode()))
            ],
        )
    base = to_memory(str(d))
    yield f"slowmem://{base}/part-{{00..09}}.tar"
    fsspec.filesystem("memory").rm(base, recursive=True)


def shards(pattern, **kw):
    return sources.TarShards(pattern, storage_options=SLOW, **kw)


def indices(loader, epoch):
    loader.set_epoch(epoch)
    return [tuple(b[2].tolist()) for b in loader]


def test_a_shard_streamed_epoch_serves_the_sampler_order_with_every_sample_once(many_shards):
    src = shards(many_shards, read="shard", buffer_shards=3)
    with HybridLoader(src, REC, 8, seed=7, return_indices=True, policy=POLICY) as ld:
        for epoch in (0, 1):
            got = indices(ld, epoch)
            assert got == [tuple(b.tolist()) for b in ld.batch_indices(epoch)]
            assert sorted(i for b in got for i in b) == list(range(60))
        assert indices(ld, 0) != indices(ld, 1)
        want = ShardOrder(tuple(src.shard_sizes), 3).rank_indices(
            60, seed=7, epoch=1, world_size=1, rank=0, shuffle=True, drop_last=False
        )
        assert [i for b in indices(ld, 1) for i in b] == want.tolist()


def test_shard_streaming_gives_the_pixels_of_per_sample_reads(many_shards):
    streamed, ranged = shards(many_shards, read="shard"), shards(many_shards)
    batch = [59, 3, 31, 0, 17, 44]
    a, b = process_batch(streamed, REC, batch, 2, 1), process_batch(ranged, REC, batch, 2, 1)
    assert a.images.equal(b.images) and a.labels.tolist() == b.labels.tolist() == [i % 3 for i in batch]
    assert streamed.read(streamed.ref(12)) == ranged.read(ranged.ref(12))


def test_shard_streaming_reads_each_shard_once_per_epoch_not_each_sample(many_shards):
    for mode, most in (("shard", 10), ("sample", None)):
        src = shards(many_shards, read=mode, buffer_shards=2)
        SlowMemoryFileSystem.reset_counts()
        with HybridLoader(src, REC, 8, seed=1, return_indices=True, policy=POLICY) as ld:
            assert len([b for b in ld]) == 8
        requests = SlowMemoryFileSystem.counts()["requests"]
        if most is None:
            assert requests == 60  # the control: one ranged read per sample
        else:
            assert requests <= most and requests * 6 <= 60
            assert src.shard_fetches == requests


def test_a_worker_holds_at_most_cache_shards_and_refetches_what_it_dropped(many_shards):
    src = shards(many_shards, read="shard", cache_shards=2)
    SlowMemoryFileSystem.reset_counts()
    for i in (0, 6, 12, 0):  # shards 0, 1, 2, then 0 again after it was dropped
        src.read(src.ref(i))
    assert len(src.cached_shards()) == 2
    assert SlowMemoryFileSystem.counts()["requests"] == src.shard_fetches == 4


def test_two_ranks_split_an_epoch_as_the_sharding_rules_say(many_shards):
    got = []
    for rank in (0, 1):
        with HybridLoader(
            shards(many_shards, read="shard"),
            REC,
            7,
            seed=3,
            rank=rank,
            world_size=2,
            return_indices=True,
            policy=POLICY,
        ) as ld:
            got.append(indices(ld, 2))
    assert len(got[0]) == len(got[1]) == 5  # 30 samples each, batches of 7: equal counts
    flat = [i for part in got for b in part for i in b]
    assert sorted(flat) == list(range(60))


def test_resume_mid_epoch_is_exact_with_shard_streaming(many_shards):
    src = shards(many_shards, read="shard", buffer_shards=2)

    def key(batch):
        images, _labels, idx = batch
        return (tuple(idx.tolist()), hashlib.md5(images.numpy().tobytes()).hexdigest())

    check_resume(
        lambda: HybridLoader(src, REC, 9, policy=POLICY, seed=2, return_indices=True),
        key=key,
        close=lambda ld: ld.close(),
    )


def test_a_pickled_source_holds_its_own_shards_and_reads_the_same_bytes(many_shards):
    src = shards(many_shards, read="shard")
    src.read(src.ref(0))
    copy = pickle.loads(pickle.dumps(src))
    assert copy.cached_shards() == [] and copy.sample_order() == src.sample_order()
    assert copy.read(copy.ref(5)) == src.read(src.ref(5))


def test_a_shard_that_vanished_after_it_was_indexed_stops_the_batch_by_name_not_skips(many_shards, folder):  # noqa: F811
    # an outage or a changed dataset, not bad samples: on_error="skip" must not turn it into zeros
    base = many_shards[len("slowmem://") :].rsplit("/", 1)[0]
    path = f"{base}/gone-0.tar"
    mem = fsspec.filesystem("memory")
    mem.pipe_file(path, mem.cat_file(f"{base}/part-00.tar"))
    src = shards(f"slowmem://{path}", read="shard")
    mem.rm(path)
    with pytest.raises(
        ShardIndexError,
        match=r"sample 0 \(slowmem://.*gone-0.tar#.*\): FileNotFoundError.* readable "
        r"when this process indexed it",
    ):
        process_batch(src, REC, [0, 1], 0, 0, on_error="skip")
    with pytest.raises(ShardIndexError, match="FileNotFoundError"):
        src.read(src.ref(0))


def test_per_sample_reads_keep_the_default_order(many_shards):
    assert shards(many_shards).sample_order() is None
    assert isinstance(shards(many_shards, read="shard").sample_order(), ShardOrder)


def test_bad_shard_options_say_what_to_write(many_shards):
    with pytest.raises(ValueError, match="read must be 'sample' .* or 'shard'"):
        shards(many_shards, read="shards")
    with pytest.raises(ValueError, match="buffer_shards must be an int >= 1"):
        shards(many_shards, read="shard", buffer_shards=0)
    with pytest.raises(ValueError, match="cache_shards must be None or an int >= 1"):
        shards(many_shards, read="shard", cache_shards=0)


def test_worker_processes_stream_what_threads_stream_from_local_shards(shard_dir):  # noqa: F811
    pattern = str(shard_dir / "shard-{000..002}.tar")
    got, _lanes = local_lane_streams(
        sources.TarShards(pattern, read="shard", buffer_shards=2),
        REC,
        8,
        seed=4,
        epochs=(0, 1),
        cpu_actors=0,
        threads=2,
    )
    assert got["threads"] == got["processes"]
    assert sorted(i for d in got["threads"][:8] for i in d[0]) == list(range(60))


def test_threads_asking_for_one_shard_share_one_fetch_and_a_failed_fetch_is_retried():
    import threading
    from hybridload.sources._tar.shard_cache import ShardCache

    gate, calls = threading.Event(), []

    def fetch(url):
        calls.append(url)
        gate.wait(timeout=10)
        if url == "bad" and calls.count("bad") == 1:
            raise OSError("first try fails")
        return url.encode()

    cache = ShardCache(fetch, capacity=4)
    futures = [cache.get("a") for _ in range(5)] + [cache.get("bad")]
    gate.set()
    assert {f.result(timeout=10) for f in futures[:5]} == {b"a"} and calls.count("a") == 1
    with pytest.raises(OSError):
        futures[5].result(timeout=10)
    assert cache.get("bad").result(timeout=10) == b"bad" and cache.fetches == 3
