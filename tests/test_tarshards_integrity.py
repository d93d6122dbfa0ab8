"""No sample of a tar-shard dataset is lost, doubled or served from the wrong member: a
manifest count of 0, a manifest rewritten between save and resume, a stale sidecar of the
same byte size, a malformed sidecar or manifest, each is caught and named."""

import json
import os
import re
import shutil

import pytest

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.cli import main
from hybridload.errors import ManifestError, ResumeMismatchError, ShardIndexError

from test_tarshards import folder, shard_dir, write_shard  # noqa: F401

REC = recipe.imagenet_train(32)
POLICY = LoaderPolicy(cpu_actors=0, threads=1)


@pytest.fixture
def shards(tmp_path, shard_dir):  # noqa: F811
    """A private copy of the 3 shards of 20 photos, indexed: (directory, manifest path)."""
    d = tmp_path / "data"
    shutil.copytree(shard_dir, d)
    assert main(["index", str(d / "shard-{000..002}.tar"), "-o", str(d / "m.json"), "--quiet", "--workers", "1"]) == 0
    return d, d / "m.json"


def small_shard(path, labels, mtime=1_700_000_000):
    """A shard of tiny samples (``k<i>.jpg`` + ``k<i>.cls``): 3 or 4 of them fill one 10 KiB record."""
    return write_shard(
        path,
        [
            m
            for i, lab in enumerate(labels)
            for m in ((f"k{i}.jpg", b"\xff\xd8" + bytes([i]) * 60), (f"k{i}.cls", f"{lab}".encode()))
        ],
    )


def test_a_zero_count_entry_for_a_shard_with_samples_is_refused_at_build(shards, tmp_path):
    d, m = shards
    doc = json.loads(m.read_text())
    doc["shardlist"][1]["nsamples"] = 0  # its 20 samples would own no index and vanish from every epoch
    m.write_text(json.dumps(doc))
    with pytest.raises(
        ShardIndexError,
        match=r"shard 1 \('.*shard-001.tar'\) of manifest .*holds 20 samples but the "
        r"manifest says nsamples=0",
    ):
        sources.TarShards(str(m))
    empty = write_shard(tmp_path / "empty.tar", [])  # a shard verified empty keeps its 0
    doc["shardlist"][1] = {"url": empty, "nsamples": 0}
    m.write_text(json.dumps(doc))
    assert len(sources.TarShards(str(m))) == 40


def _two_batches_then_state(src, **kw):
    with HybridLoader(src, REC, 5, seed=1, return_indices=True, policy=POLICY, **kw) as ld:
        it = iter(ld)
        seen = [next(it)[2].tolist() for _ in range(2)]
        return ld.state_dict(), seen


@pytest.mark.parametrize("kw", [{}, {"order": "keyed"}])
def test_a_manifest_rewritten_with_its_shards_reordered_is_refused_at_resume(shards, kw):
    d, m = shards
    state, _ = _two_batches_then_state(sources.TarShards(str(m)), **kw)
    doc = json.loads(m.read_text())
    doc["shardlist"] = doc["shardlist"][::-1]  # same total, same sizes: only the order of samples changed
    m.write_text(json.dumps(doc))
    with HybridLoader(sources.TarShards(str(m)), REC, 5, seed=1, policy=POLICY, **kw) as ld:
        with pytest.raises(ResumeMismatchError, match=r"source=.*3 shards, 60 samples") as info:
            ld.load_state_dict(state)
    assert info.value.field == "source"
    # a dataset moved with its manifest (relative URLs) keeps its fingerprint and resumes
    doc["shardlist"] = doc["shardlist"][::-1]
    m.write_text(json.dumps(doc))
    moved = shutil.copytree(d, d.parent / "moved")
    with HybridLoader(sources.TarShards(str(moved / "m.json")), REC, 5, seed=1, policy=POLICY, **kw) as ld:
        ld.load_state_dict(state)
    # the shards given as a list are fingerprinted too
    urls = [str(d / f"shard-{s:03d}.tar") for s in range(3)]
    state, _ = _two_batches_then_state(sources.TarShards(urls), **kw)
    with HybridLoader(sources.TarShards(urls[::-1]), REC, 5, seed=1, policy=POLICY, **kw) as ld:
        with pytest.raises(ResumeMismatchError, match="source="):
            ld.load_state_dict(state)


def test_a_stale_sidecar_of_the_same_size_is_not_used(tmp_path, caplog):
    path = small_shard(tmp_path / "s.tar", [0, 1, 2])
    assert main(["index", path, "-o", str(tmp_path / "m.json"), "--quiet", "--workers", "1"]) == 0
    size, stamp = os.path.getsize(path), os.stat(path).st_mtime_ns
    small_shard(path, [7, 7, 7, 7])  # one sample more, other labels: tar's records keep the size
    os.utime(path, ns=(2_000_000_000 * 10**9, 2_000_000_000 * 10**9))
    assert os.path.getsize(path) == size
    src = sources.TarShards(path)
    assert len(src) == 4 and [src.ref(i).label for i in range(4)] == [7] * 4
    assert "stale sidecar index" in caplog.text and "modified at" in caplog.text
    caplog.clear()
    # the same with the old modification time put back: the member past the recorded end shows it
    os.utime(path, ns=(stamp, stamp))
    src = sources.TarShards(path)
    assert len(src) == 4 and "members past the end it records" in caplog.text


def test_a_shard_rewritten_under_its_sidecar_is_named_stale_not_a_corrupt_image(tmp_path):
    path = small_shard(tmp_path / "s.tar", [0, 1, 2, 3])
    assert main(["index", path, "-o", str(tmp_path / "m.json"), "--quiet", "--workers", "1"]) == 0
    stamp = os.stat(path).st_mtime_ns
    write_shard(path, [(f"z{i}.jpg", b"\xff\xd8" + bytes([i]) * 61) for i in range(4)])  # other members, same size
    os.utime(path, ns=(stamp, stamp))  # and the old time: the sidecar looks current
    src = sources.TarShards(str(tmp_path / "m.json"))
    with pytest.raises(
        ShardIndexError,
        match=r"sample 1 .*s.tar#k1.jpg.*names 'z2.jpg' of 63 bytes, not 'k1.jpg' of "
        r"62.*shard changed since its member index was built \(a stale sidecar",
    ):
        src.read(src.ref(1))


@pytest.mark.parametrize(
    "entries, match",
    [
        (
            [{"url": "a.tar", "nsamples": 2**63}],
            r"shardlist\[0\] \('a.tar'\) has nsamples=9223372036854775808: the counts up "
            r"to it sum to .* past the 9223372036854775807 samples",
        ),
        (
            [{"url": "a.tar", "nsamples": 2**62}, {"url": "b.tar", "nsamples": 2**62}],
            r"shardlist\[1\] \('b.tar'\) has nsamples=4611686018427387904: the counts up to it sum to 9223372036854775808",
        ),
        (
            [{"url": "a.tar", "nsamples": 3}, {"url": "b.tar", "nsamples": 3}, {"url": "./a.tar", "nsamples": 3}],
            r"lists the shard '.*a.tar' twice \(shardlist\[0\] and shardlist\[2\]\): its samples would come twice",
        ),
    ],
)
def test_counts_past_int64_and_a_shard_listed_twice_are_manifest_errors_naming_the_entry(tmp_path, entries, match):
    (tmp_path / "m.json").write_text(json.dumps({"wids_version": 1, "shardlist": entries}))
    with pytest.raises(ManifestError, match=match):
        sources.TarShards(str(tmp_path / "m.json"))


def test_a_pattern_or_list_naming_a_shard_twice_is_refused(shard_dir):  # noqa: F811
    with pytest.raises(ValueError, match=r"the shard '.*shard-000.tar' is named twice .* would come twice every epoch"):
        sources.TarShards(str(shard_dir / "shard-{000,001,000}.tar"))
    with pytest.raises(ValueError, match="named twice"):
        sources.TarShards([str(shard_dir / "shard-001.tar")] * 2)
    assert main(["index", str(shard_dir / "shard-{000,000}.tar"), "-o", str(shard_dir / "m.json"), "--quiet"]) == 2


@pytest.mark.parametrize(
    "samples, why",
    [
        ([1, 2, 3], r"samples\[0\] is 1, not \[key"),
        ("all", r"\"samples\" is a str"),
        ([["k", [["jpg", -5, 10]], None]], r"offset -5 of 10 bytes, outside the shard"),
        ([["k", [["jpg", 1024, 10**12]], None]], r"offset 1024 of 1000000000000 bytes, outside the shard"),
        ([["k", [["jpg", "1024", 10]], None]], r"has the member \['jpg', '1024', 10\], not \[ext, offset, size\]"),
    ],
)
def test_a_malformed_sidecar_is_ignored_with_a_warning_and_the_shard_scanned(shards, caplog, samples, why):
    d, m = shards
    side = d / "shard-001.tar.members.json"
    doc = json.loads(side.read_text())
    doc["samples"] = samples
    side.write_text(json.dumps(doc))
    src = sources.TarShards(str(m))
    good = sources.TarShards(str(d / "shard-001.tar"), image_exts=("jpg",))
    assert [src.read(src.ref(20 + i)) for i in range(20)] == [good.read(good.ref(i)) for i in range(20)]
    assert "ignoring the malformed sidecar index" in caplog.text and "shard-001.tar.members.json" in caplog.text
    assert any(re.search(why, r.getMessage()) for r in caplog.records)


def test_members_with_long_or_non_ascii_names_pass_the_per_read_header_check(tmp_path):
    # pax (tarfile's default) keeps such names in an extended header: the member's own header
    # holds a stand-in ('caf?.jpg', the first 100 bytes), which must not read as a changed shard
    names = ["café_0.jpg", "Ünïcode/ß_1.JPG", "x" * 150 + "_2.jpg", "d" * 90 + "/" + "k" * 30 + "_3.jpg"]
    path = write_shard(tmp_path / "u.tar", [(n, b"\xff\xd8" + bytes([i]) * (50 + i)) for i, n in enumerate(names)])
    src = sources.TarShards(path)
    assert [src.read(src.ref(i))[0] for i in range(4)] == [b"\xff\xd8" + bytes([i]) * (50 + i) for i in range(4)]


def _one_shard_in_sub(tmp_path, monkeypatch):
    """``sub/s0.tar`` (3 samples) and ``sub/link.tar`` (a symlink to it), the working directory at ``tmp_path``."""
    (tmp_path / "sub").mkdir()
    small_shard(tmp_path / "sub" / "s0.tar", [0, 1, 2])
    os.symlink("s0.tar", tmp_path / "sub" / "link.tar")
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    "second", ["sub/./s0.tar", "sub//s0.tar", "sub/../sub/s0.tar", "sub/link.tar", "file://{tmp}/sub/s0.tar"]
)
def test_one_shard_under_two_spellings_is_refused_naming_both_entries(tmp_path, monkeypatch, second):
    _one_shard_in_sub(tmp_path, monkeypatch)
    second = second.format(tmp=tmp_path)
    with pytest.raises(ValueError, match=rf"'sub/s0.tar' and {re.escape(repr(second))} name the same shard"):
        sources.TarShards(["sub/s0.tar", second])
    with pytest.raises(ValueError, match=r"name the same shard"):  # a relative and an absolute spelling
        sources.TarShards([str(tmp_path / "sub" / "s0.tar"), second])


def test_index_refuses_a_pattern_naming_one_shard_twice_and_writes_no_manifest(tmp_path, monkeypatch, capsys):
    _one_shard_in_sub(tmp_path, monkeypatch)
    for pattern in ("sub/{s0,./s0}.tar", "sub/{s0,link}.tar"):
        assert main(["index", pattern, "-o", "m.json", "--quiet", "--workers", "1"]) == 2
        err = capsys.readouterr().err
        assert "name the same shard" in err and "sub/s0.tar" in err, err
        assert sorted(os.listdir(tmp_path)) == ["sub"]


@pytest.mark.parametrize("second", ["{tmp}/sub//s0.tar", "file://{tmp}/sub/s0.tar", "{tmp}/sub/../sub/s0.tar"])
def test_a_manifest_listing_one_shard_under_two_spellings_is_a_manifest_error(tmp_path, monkeypatch, second):
    _one_shard_in_sub(tmp_path, monkeypatch)
    entries = [{"url": "sub/s0.tar", "nsamples": 3}, {"url": second.format(tmp=tmp_path), "nsamples": 3}]
    (tmp_path / "m.json").write_text(json.dumps({"wids_version": 1, "shardlist": entries}))
    with pytest.raises(ManifestError, match=r"lists the shard .*s0.tar' twice \(shardlist\[0\] and shardlist\[1\]"):
        sources.TarShards(str(tmp_path / "m.json"))


def _twice(s):
    s[1] = s[0]  # one sample listed twice, its neighbour never


def _swapped(s):
    s[0], s[1] = s[1], s[0]


def _relabelled(s):
    s[0][2] = "2\n" if s[0][2] != "2\n" else "1\n"


def _off_boundary(s):
    s[3][1] = [[ext, off + 100, size - 100] if ext == "jpg" else [ext, off, size] for ext, off, size in s[3][1]]


def _member_of_another(s):
    jpg6 = next(m for m in s[6][1] if m[0] == "jpg")
    s[5][1] = [m if m[0] != "cls" else ["cls", *jpg6[1:]] for m in s[5][1]]  # sample 6's image as 5's label


def _past_end(s):
    s[-1][1] = [[ext, off + 4 * 512, size] for ext, off, size in s[-1][1]]


@pytest.mark.parametrize(
    "edit, why",
    [
        (
            _twice,
            r"samples\[1\] \('.*'\) does not follow samples\[0\] in tar order: a member listed twice or out of order",
        ),
        (_swapped, r"samples\[1\] \('.*'\) does not follow samples\[0\] in tar order"),
        (_relabelled, r"its member table does not match its digest \(edited after `hybridload index` wrote it"),
        (_off_boundary, r"samples\[3\] \('.*'\) has a member at offset \d+, not on a 512-byte tar block"),
        (_member_of_another, r"samples\[6\] \('.*'\) has a member at offset \d+, inside a member of samples\[5\]"),
        (
            _past_end,
            r"samples\[19\] \('.*'\) has a member at offset \d+ of \d+ bytes, outside the shard's members \(bytes 512 to \d+\)",
        ),
    ],
)
def test_a_sidecar_whose_member_table_was_edited_is_ignored_and_the_shard_scanned(shards, caplog, edit, why):
    # size, stamp and end stay: only the table's own order, bounds and digest show the edit
    d, m = shards
    side = d / "shard-001.tar.members.json"
    doc = json.loads(side.read_text())
    edit(doc["samples"])
    side.write_text(json.dumps(doc))
    src = sources.TarShards(str(m))
    good = sources.TarShards(str(d / "shard-001.tar"), image_exts=("jpg",))
    assert [src.read(src.ref(20 + i)) for i in range(20)] == [good.read(good.ref(i)) for i in range(20)]
    assert [src.ref(20 + i).location for i in range(20)] == [good.ref(i).location for i in range(20)]
    assert "shard-001.tar.members.json" in caplog.text
    assert any(re.search(why, r.getMessage()) for r in caplog.records), caplog.text


def test_a_sidecar_an_older_hybridload_wrote_is_scanned_with_one_warning_to_index_again(shards, caplog, monkeypatch):
    from hybridload.sources._tar import sidecar

    monkeypatch.setattr(sidecar, "_older_seen", False)  # the warning is once per process
    d, m = shards
    for s in range(3):
        side = d / f"shard-{s:03d}.tar.members.json"
        doc = json.loads(side.read_text())
        doc["hybridload_members"] = 2  # an older sidecar: no digest of its table
        del doc["digest"]
        side.write_text(json.dumps(doc))
    src = sources.TarShards(str(m))
    assert [src.ref(i).label for i in range(60)] == [sources.TarShards(str(m)).ref(i).label for i in range(60)]
    older = [r.getMessage() for r in caplog.records if "an older hybridload" in r.getMessage()]
    assert len(older) == 1 and "run `hybridload index` again" in older[0], caplog.text
