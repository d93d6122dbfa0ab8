"""TarShards: WebDataset-layout shards read by random access through a member index."""

import hashlib
import io
import os
import pickle
import tarfile

import pytest
import torch

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import SampleError, ShardIndexError
from hybridload._kernels import process_sample
from hybridload.sources import braceexpand, expand_urls
from hybridload.sources._tar import tar_index

from support.resume_helper import check_resume
from support.streams import stream as _stream

REC = recipe.imagenet_train(48)


def write_shard(path, samples):
    """samples: [(member name, bytes)] in tar order."""
    with tarfile.open(path, "w") as tf:
        for name, data in samples:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_700_000_000
            tf.addfile(info, io.BytesIO(data))
    return str(path)


def folder_key(path, root):
    """The tar key of an ImageFolder file: its path under root, without the extension."""
    return os.path.splitext(os.path.relpath(path, root))[0]


@pytest.fixture(scope="module")
def folder(photo_root):
    return sources.ImageFolder(photo_root)


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory, photo_root, folder):
    """The photo_root images in ImageFolder order as 3 shards of 20 samples, each with a
    .cls member and a metadata member before the image."""
    d = tmp_path_factory.mktemp("shards")
    order = list(zip(folder.paths, folder._labels.tolist()))
    for s in range(3):
        members = []
        for path, label in order[20 * s : 20 * (s + 1)]:
            key = folder_key(path, photo_root)
            members.append((f"{key}.json", b'{"source": "photo"}'))
            members.append((f"{key}.jpg", open(path, "rb").read()))
            members.append((f"{key}.cls", f"{label}\n".encode()))
        write_shard(d / f"shard-{s:03d}.tar", members)
    return d


@pytest.fixture
def pattern(shard_dir):
    return str(shard_dir / "shard-{000..002}.tar")


def stream(loader, epochs=(0, 1)):
    return _stream(loader, epochs)


# ----------------------------------------------------------------------------- same data as ImageFolder


def test_tar_keys_labels_and_bytes_follow_the_image_folder_order(pattern, folder, photo_root):
    tar = sources.TarShards(pattern)
    assert len(tar) == len(folder) == 60
    assert tar.shard_sizes == [20, 20, 20]
    assert tar.keys() == [folder_key(p, photo_root) for p in folder.paths]
    for i in range(len(tar)):
        ref = tar.ref(i)
        assert ref.label == folder.ref(i).label
        assert ref.location.endswith(f"#{tar.keys()[i]}.jpg")
        assert tar.read(ref) == folder.read(folder.ref(i))


def test_tar_and_image_folder_give_the_same_pixels_per_index(pattern, folder):
    tar = sources.TarShards(pattern)
    for i in range(len(tar)):
        a, la = process_sample(tar, REC, i, seed=3, epoch=1)
        b, lb = process_sample(folder, REC, i, seed=3, epoch=1)
        assert la == lb
        assert torch.equal(a, b), f"index {i} differs"


# ----------------------------------------------------------------------------- sharding invariants


def test_two_ranks_cover_every_index_once_per_epoch_with_equal_batch_counts(pattern, folder):
    tar = sources.TarShards(pattern)
    per_rank = []
    for rank in range(2):
        with HybridLoader(
            tar,
            REC,
            7,
            rank=rank,
            world_size=2,
            seed=4,
            return_indices=True,
            policy=LoaderPolicy(cpu_actors=0, threads=2),
        ) as ld:
            got = stream(ld)
        with HybridLoader(
            folder,
            REC,
            7,
            rank=rank,
            world_size=2,
            seed=4,
            return_indices=True,
            policy=LoaderPolicy(cpu_actors=0, threads=2),
        ) as ld:
            assert got == stream(ld), "the tar stream differs from the ImageFolder stream"
        per_rank.append(got)
    assert len(per_rank[0]) == len(per_rank[1]) == 2 * 5
    for epoch in range(2):
        batches = [b for r in per_rank for b in r[5 * epoch : 5 * (epoch + 1)]]
        assert sorted(i for idx, _lab, _d in batches for i in idx) == list(range(60))


def test_resume_reproduces_the_tar_stream(pattern):
    tar = sources.TarShards(pattern)

    def key(batch):
        images, _labels, indices = batch
        return (tuple(indices.tolist()), hashlib.md5(images.numpy().tobytes()).hexdigest())

    check_resume(
        lambda: HybridLoader(tar, REC, 9, policy=LoaderPolicy(cpu_actors=0, threads=2), seed=2, return_indices=True),
        key=key,
        close=lambda ld: ld.close(),
    )


# ----------------------------------------------------------------------------- brace expansion


@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("train-{000000..000002}.tar", ["train-000000.tar", "train-000001.tar", "train-000002.tar"]),
        ("s-{8..11}.tar", ["s-8.tar", "s-9.tar", "s-10.tar", "s-11.tar"]),
        ("s-{08..11}.tar", ["s-08.tar", "s-09.tar", "s-10.tar", "s-11.tar"]),
        ("s-{0..6..3}", ["s-0", "s-3", "s-6"]),
        ("s-{3..1}", ["s-3", "s-2", "s-1"]),
        ("{a..c}", ["a", "b", "c"]),
        ("{train,val}-{0..1}.tar", ["train-0.tar", "train-1.tar", "val-0.tar", "val-1.tar"]),
        ("a{b,c{d,e}}f", ["abf", "acdf", "acef"]),
        ("plain.tar", ["plain.tar"]),
        ("keep-{x}.tar", ["keep-{x}.tar"]),
        (r"esc-\{0..1\}.tar", ["esc-{0..1}.tar"]),
        ("s-{0..4..0}", ["s-0", "s-1", "s-2", "s-3", "s-4"]),  # bash (and the library) read a step of 0 as 1
        ("s-{098..100}.tar", ["s-098.tar", "s-099.tar", "s-100.tar"]),
        (
            "s3://bucket/{a,b}/x-{0..1}.tar",
            ["s3://bucket/a/x-0.tar", "s3://bucket/a/x-1.tar", "s3://bucket/b/x-0.tar", "s3://bucket/b/x-1.tar"],
        ),
    ],
)
def test_braceexpand_matches_shell_semantics(pattern, expected):
    assert braceexpand(pattern) == expected


@pytest.mark.parametrize(
    "bad, message", [("s-{0..2.tar", "unbalanced braces"), (r"esc-\{0..1}.tar", "unbalanced braces")]
)
def test_braceexpand_rejects_malformed_patterns(bad, message):
    with pytest.raises(ValueError, match=message):
        braceexpand(bad)


def test_a_list_of_urls_is_expanded_entry_by_entry_in_order(shard_dir):
    assert expand_urls(["b-{0..1}.tar", "a.tar"]) == ["b-0.tar", "b-1.tar", "a.tar"]
    listed = sources.TarShards([str(shard_dir / f"shard-{s:03d}.tar") for s in (2, 0)])
    assert listed.shard_sizes == [20, 20]
    assert listed.keys()[:20] == sources.TarShards(str(shard_dir / "shard-002.tar")).keys()


# ----------------------------------------------------------------------------- the member index


class CountingTarOpen:
    def __init__(self):
        self.calls = 0
        self._open = tarfile.open

    def __call__(self, *a, **kw):
        self.calls += 1
        return self._open(*a, **kw)


def test_member_index_is_built_once_per_shard_and_reads_never_scan(pattern, shard_dir, tmp_path, monkeypatch):
    counter = CountingTarOpen()
    monkeypatch.setattr(tar_index.tarfile, "open", counter)
    a = sources.TarShards(pattern)
    assert counter.calls == 3
    for i in range(len(a)):
        a.read(a.ref(i))
    assert counter.calls == 3, "reading samples must not scan the shards"
    b = sources.TarShards(pattern)  # no module-level cache: a new source scans again
    assert counter.calls == 6 and a.keys() == b.keys()

    cache = tmp_path / "index-cache"
    sources.TarShards(pattern, cache_dir=cache)
    assert counter.calls == 9
    assert len(list(cache.glob("*.index.json"))) == 3
    c = sources.TarShards(pattern, cache_dir=cache)  # from the JSON files
    assert counter.calls == 9
    assert c.keys() == a.keys() and [c.span(i) for i in range(len(c))] == [a.span(i) for i in range(len(a))]

    st = os.stat(shard_dir / "shard-001.tar")  # a changed mtime invalidates that shard's entry only
    os.utime(shard_dir / "shard-001.tar", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    sources.TarShards(pattern, cache_dir=cache)
    assert counter.calls == 10


def test_refs_and_the_source_are_small_plain_picklable_data(pattern):
    tar = sources.TarShards(pattern)
    tar.read(tar.ref(5))
    ref = tar.ref(5)
    assert len(pickle.dumps(ref)) < 400
    clone = pickle.loads(pickle.dumps(tar))
    assert clone.read(clone.ref(5)) == tar.read(ref)
    assert len(pickle.dumps(tar)) < 20_000  # arrays and names; no handles, no file systems


def test_a_label_function_overrides_cls_and_missing_cls_is_unlabelled(tmp_path, folder):
    data = folder.read(folder.ref(0))[0]
    path = write_shard(
        tmp_path / "x.tar",
        [
            ("a/k_0.jpg", data),
            ("a/k_0.cls", b"3"),
            ("a/k_1.png", data),
            ("README", b"no extension: skipped"),
            ("a/k_2.seg.jpg", data),
        ],
    )
    assert [r.label for r in map(sources.TarShards(path).ref, range(3))] == [3, -1, -1]
    tar = sources.TarShards(path, label=lambda key: int(key[-1]) + 10)
    assert tar.keys() == ["a/k_0", "a/k_1", "a/k_2"]
    assert [tar.ref(i).label for i in range(3)] == [10, 11, 12]
    assert tar.ref(2).location.endswith("x.tar#a/k_2.seg.jpg")


def test_the_image_member_is_the_first_with_an_image_extension(tmp_path, folder):
    a, b = folder.read(folder.ref(0))[0], folder.read(folder.ref(1))[0]
    path = write_shard(tmp_path / "x.tar", [("k.txt", b"caption"), ("k.png", a), ("k.jpg", b)])
    tar = sources.TarShards(path)
    assert tar.read(tar.ref(0))[0] == a
    tar = sources.TarShards(path, image_exts=("jpg",))
    assert tar.read(tar.ref(0))[0] == b


# ----------------------------------------------------------------------------- errors


def test_no_shards_is_a_clear_error():
    with pytest.raises(ValueError, match="no shards given"):
        sources.TarShards([])


def test_a_missing_shard_is_named(shard_dir):
    missing = str(shard_dir / "shard-009.tar")
    with pytest.raises(FileNotFoundError, match="shard-009.tar"):
        sources.TarShards(str(shard_dir / "shard-{000,009}.tar"))
    with pytest.raises(FileNotFoundError, match=f"shard {missing!r} does not exist"):
        sources.TarShards([missing])


def test_a_key_without_an_image_names_the_shard_and_key(tmp_path, folder):
    data = folder.read(folder.ref(0))[0]
    path = write_shard(tmp_path / "x.tar", [("ok.jpg", data), ("lonely.cls", b"1"), ("lonely.txt", b"hi")])
    with pytest.raises(ValueError, match=r"x\.tar', key 'lonely' has no image member .*lonely\.cls, lonely\.txt"):
        sources.TarShards(path)


@pytest.mark.parametrize("cls", [b"cat", b"", b"1.5"])
def test_a_bad_cls_names_the_shard_and_key(tmp_path, folder, cls):
    data = folder.read(folder.ref(0))[0]
    path = write_shard(
        tmp_path / "x.tar", [("good.jpg", data), ("good.cls", b"2"), ("bad.jpg", data), ("bad.cls", cls)]
    )
    with pytest.raises(ValueError, match=r"x\.tar', key 'bad': bad\.cls holds .* not an integer"):
        sources.TarShards(path)


def test_a_label_function_that_returns_no_int_names_the_key(tmp_path, folder):
    path = write_shard(tmp_path / "x.tar", [("k1.jpg", folder.read(folder.ref(0))[0])])
    with pytest.raises(ValueError, match=r"label\('k1'\) .* returned 'one'"):
        sources.TarShards(path, label=lambda key: "one")


def test_duplicate_members_and_unreadable_shards_are_named(tmp_path, folder):
    data = folder.read(folder.ref(0))[0]
    dup = write_shard(tmp_path / "dup.tar", [("k.jpg", data), ("k.jpg", data)])
    with pytest.raises(ValueError, match=r"dup\.tar', key 'k': duplicate member 'k.jpg'"):
        sources.TarShards(dup)
    gz = tmp_path / "x.tar.gz"
    with tarfile.open(gz, "w:gz") as tf:
        tf.add(write_shard(tmp_path / "inner.tar", [("k.jpg", data)]), arcname="k.jpg")
    with pytest.raises(ValueError, match=r"x\.tar\.gz' is gzip-compressed"):
        sources.TarShards(str(gz))
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar file at all" * 100)
    with pytest.raises(ValueError, match=r"junk\.tar' is not a readable tar file"):
        sources.TarShards(str(junk))
    empty = write_shard(tmp_path / "empty.tar", [])
    with pytest.raises(ValueError, match="hold no samples"):
        sources.TarShards(empty)


def test_a_shard_truncated_or_deleted_after_indexing_is_a_shard_error_naming_the_sample(tmp_path, folder):
    # once a process indexed a shard, a shard cut short or gone is an outage or a changed
    # dataset, never a bad sample to skip: ShardIndexError (not a SampleError) names shard and sample
    data = [folder.read(folder.ref(i))[0] for i in range(3)]
    path = write_shard(tmp_path / "t.tar", [(f"k{i}.jpg", d) for i, d in enumerate(data)])
    tar = sources.TarShards(path)
    with open(path, "r+b") as f:
        f.truncate(tar.span(2)[1] + 10)
    assert tar.read(tar.ref(1))[0] == data[1]
    with pytest.raises(
        ShardIndexError,
        match=r"sample 2 \(.*t.tar#k2.jpg\): got 10 of \d+ bytes .* shorter than when "
        r"this process indexed it",
    ) as info:
        tar.read(tar.ref(2))
    assert not isinstance(info.value, SampleError) and "t.tar" in info.value.where
    os.remove(path)
    with pytest.raises(ShardIndexError, match=r"sample 0 .*FileNotFoundError.* readable when this process indexed it"):
        tar.read(tar.ref(0))
