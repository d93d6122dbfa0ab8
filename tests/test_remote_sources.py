"""Sources over fsspec URLs (file://, memory://), in the driver and in Ray actors on
other (simulated) nodes, give the same stream as the local sources."""

import os
import sys
import uuid

import fsspec
import pytest

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import SampleError

from test_tarshards import folder, shard_dir  # noqa: F401  (fixtures)
from support.streams import stream as _stream


def stream(loader, epochs=(0, 1)):
    return _stream(loader, epochs)


REC = recipe.imagenet_train(48)


def to_memory(local_root: str) -> tuple[str, dict]:
    """Copy a local tree into this process's memory:// filesystem under a fresh root:
    (root URL, {memory path: bytes})."""
    base = f"/hl-{uuid.uuid4().hex[:8]}"
    fs = fsspec.filesystem("memory")
    files = {}
    for dirpath, _dirs, names in os.walk(local_root):
        for name in names:
            path = os.path.join(dirpath, name)
            dest = f"{base}/{os.path.relpath(path, local_root)}"
            files[dest] = open(path, "rb").read()
            fs.pipe_file(dest, files[dest])
    return f"memory://{base}", files


class MemorySeeded(sources.Source):
    """A source whose memory:// files exist in every process that reads it.

    fsspec's memory:// filesystem lives inside one process: an actor on another node
    starts with it empty. This wrapper stands in for shared remote storage (an object
    store every node can reach): it carries the files' bytes and, on its first read in a
    process, writes them into that process's memory:// filesystem; from then on the
    wrapped source reads them through fsspec exactly as it would read s3:// or gs://. The
    driver never reads or ships a sample's bytes for the actors. (A Ray task pinned to a
    node that writes the files would depend on Ray reusing that worker process; carrying
    the bytes with the source does not.) The "seeded" flag is per process: it is reset
    whenever the source is unpickled.
    """

    def __init__(self, inner: sources.Source, files: dict):
        self.inner, self.files = inner, files
        self._seeded = False

    def __getstate__(self):
        return {**self.__dict__, "_seeded": False}

    def __len__(self):
        return len(self.inner)

    def _seed(self):
        if not self._seeded:
            fs = fsspec.filesystem("memory")
            for path, data in self.files.items():
                if not fs.exists(path):
                    fs.pipe_file(path, data)
            self._seeded = True

    def ref(self, index):  # a TarShards ref reads its shard's member index where it runs
        self._seed()
        return self.inner.ref(index)

    def read(self, ref):
        self._seed()
        return self.inner.read(ref)


@pytest.fixture
def by_value():
    """Actors import hybridload but not this test module (Ray puts the driver's working
    directory on their path, which is not tests/ under `make test`): send its classes by value."""
    import ray

    module = sys.modules[__name__]
    ray.cloudpickle.register_pickle_by_value(module)
    yield
    ray.cloudpickle.unregister_pickle_by_value(module)


@pytest.fixture(scope="module")
def memory_folder(photo_root):
    root, files = to_memory(photo_root)
    yield root, files
    fsspec.filesystem("memory").rm(root[len("memory://") :], recursive=True)


@pytest.fixture(scope="module")
def memory_shards(shard_dir):  # noqa: F811
    root, files = to_memory(str(shard_dir))
    yield f"{root}/shard-{{000..002}}.tar", files
    fsspec.filesystem("memory").rm(root[len("memory://") :], recursive=True)


# ----------------------------------------------------------------------------- in the driver


def test_image_folder_over_memory_url_matches_the_local_folder(memory_folder, photo_root):
    root, _files = memory_folder
    remote, local = sources.ImageFolder(root), sources.ImageFolder(photo_root)
    assert remote.classes == local.classes
    assert remote._labels.tolist() == local._labels.tolist()
    assert [p[len(root) :] for p in remote.paths] == [p[len(photo_root) :] for p in local.paths]
    assert all(p.startswith(root + "/") for p in remote.paths)
    with (
        HybridLoader(remote, REC, 7, seed=1, return_indices=True, policy=LoaderPolicy(cpu_actors=0, threads=2)) as a,
        HybridLoader(local, REC, 7, seed=1, return_indices=True, policy=LoaderPolicy(cpu_actors=0, threads=2)) as b,
    ):
        assert stream(a) == stream(b)


def test_file_list_reads_file_and_memory_urls_and_names_missing_ones(photo_root, memory_folder):
    local = sources.ImageFolder(photo_root)
    root, _files = memory_folder
    paths = [
        "file://" + local.paths[0],
        root + local.paths[1][len(photo_root) :],
        local.paths[2],
        root + "/class_000/missing.jpg",
    ]
    fl = sources.FileList(paths, [0, 1, 2, 3])
    for i in range(3):
        assert fl.read(fl.ref(i)) == (local.read(local.ref(i))[0], i)
    with pytest.raises(SampleError) as info:
        fl.read(fl.ref(3))
    assert (info.value.index, info.value.path, info.value.stage) == (3, paths[3], "read")
    assert "FileNotFoundError" in info.value.reason


def test_image_folder_over_a_missing_url_root_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="memory://nowhere-.* is not a directory"):
        sources.ImageFolder(f"memory://nowhere-{uuid.uuid4().hex}")


def test_an_unknown_protocol_fails_when_the_source_is_built_not_per_sample(tmp_path):
    with pytest.raises(ValueError, match="cannot open 'nosuchproto://x/y' through fsspec"):
        sources.FileList([str(tmp_path / "a.jpg"), "nosuchproto://x/y"])
    with pytest.raises(ValueError, match="cannot open 'nosuchproto://x/s-0.tar' through fsspec"):
        sources.TarShards("nosuchproto://x/s-{0..1}.tar")


def test_tar_shards_over_memory_and_file_urls_match_local_shards(memory_shards, shard_dir, tmp_path):  # noqa: F811
    pattern, _files = memory_shards
    local = sources.TarShards(str(shard_dir / "shard-{000..002}.tar"))
    for remote in (
        sources.TarShards(pattern, cache_dir=tmp_path),
        sources.TarShards(f"file://{shard_dir}/shard-{{000..002}}.tar"),
    ):
        assert remote.keys() == local.keys()
        assert [remote.ref(i).label for i in range(60)] == [local.ref(i).label for i in range(60)]
        for i in (0, 19, 20, 59):
            assert remote.read(remote.ref(i)) == local.read(local.ref(i))
    assert len(list(tmp_path.glob("shard-000.tar-*.index.json"))) == 1
    with pytest.raises(FileNotFoundError, match=r"shard 'memory://.*/shard-007.tar' does not exist"):
        sources.TarShards(pattern.replace("{000..002}", "007"))


# ----------------------------------------------------------------------------- in Ray actors on other nodes


@pytest.mark.parametrize("kind", ["folder", "shards"])
def test_ray_actors_on_remote_nodes_read_memory_urls_themselves(
    ray_cluster, by_value, memory_folder, memory_shards, kind
):
    import ray

    if kind == "folder":
        inner, files = sources.ImageFolder(memory_folder[0]), memory_folder[1]
    else:
        inner, files = sources.TarShards(memory_shards[0]), memory_shards[1]
    with HybridLoader(
        inner, REC, 7, seed=5, return_indices=True, policy=LoaderPolicy(cpu_actors=0, threads=2)
    ) as local:
        expected = stream(local)
    with HybridLoader(
        MemorySeeded(inner, files),
        REC,
        7,
        seed=5,
        return_indices=True,
        policy=LoaderPolicy(ray_address="embedded", cpu_actors=2, reserve_local_cpus=2),
    ) as remote:
        got = stream(remote)
        trainer = ray.get_runtime_context().get_node_id()
        nodes = remote._lanes[0].nodes
        assert len(nodes) == 2 and trainer not in nodes
        assert remote.stats()["lanes"]["ray"]["images"] == 120
    assert got == expected


def test_ray_actors_do_not_get_memory_files_from_the_driver(ray_cluster, memory_folder):
    """The control for the test above: without the seeding wrapper, an actor's own
    memory:// is empty, so it fails to read — the bytes were not shipped by the driver."""
    src = sources.ImageFolder(memory_folder[0])
    with HybridLoader(
        src, REC, 7, shuffle=False, policy=LoaderPolicy(ray_address="embedded", cpu_actors=2, reserve_local_cpus=2)
    ) as ld:
        with pytest.raises(SampleError) as info:
            next(iter(ld))
    assert info.value.stage == "read" and info.value.path.startswith("memory://")


def test_ship_bytes_serves_tar_shards_to_actors_that_cannot_see_them(ray_cluster, memory_shards):
    """memory:// shards exist only in the driver: with ship_bytes the actors get each sample's
    bytes, label and location from the driver and never ask the source (whose refs read the
    shard's member index) for a shipped sample."""
    inner = sources.TarShards(memory_shards[0])
    with HybridLoader(
        inner, REC, 7, seed=5, return_indices=True, policy=LoaderPolicy(cpu_actors=0, threads=2)
    ) as local:
        expected = stream(local)
    with HybridLoader(
        inner,
        REC,
        7,
        seed=5,
        return_indices=True,
        policy=LoaderPolicy(ray_address="embedded", cpu_actors=2, reserve_local_cpus=2, ship_bytes=True),
    ) as remote:
        got = stream(remote)
        assert remote.stats()["lanes"]["ray"]["images"] == 120
    assert got == expected
