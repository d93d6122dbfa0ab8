"""Shard manifests and per-shard member indexes: ``hybridload index`` writes a manifest and
sidecars, ``TarShards(manifest)`` is built from it without touching a shard and serves the
stream of the brace pattern; what disagrees with the manifest is a named error."""

import json
import os
import pickle
import shutil

import fsspec
import pytest

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.cli import main
from hybridload.errors import ManifestError, ShardIndexError
from hybridload.sources._tar import shard_scan, tar_index

from support.streams import stream
from test_tarshards import CountingTarOpen, folder, shard_dir, write_shard  # noqa: F401

REC = recipe.imagenet_train(48)


@pytest.fixture
def shards(tmp_path, shard_dir):  # noqa: F811
    """A private copy of the 3 shards of 20 photos: (directory, brace pattern)."""
    d = tmp_path / "data"
    shutil.copytree(shard_dir, d)
    return d, str(d / "shard-{000..002}.tar")


def index(pattern, out, *extra):
    return main(["index", pattern, "-o", str(out), "--quiet", *extra])


def test_index_then_load_serves_the_samples_labels_and_stream_of_the_pattern(shards, monkeypatch):
    d, pattern = shards
    assert index(pattern, d / "manifest.json", "--workers", "2") == 0  # processes
    doc = json.loads((d / "manifest.json").read_text())
    assert doc == {"wids_version": 1, "shardlist": [{"url": f"shard-{s:03d}.tar", "nsamples": 20} for s in range(3)]}
    assert not (d / "manifest.json.partial").exists()
    assert sorted(p.name for p in d.glob("*.members.json")) == [f"shard-{s:03d}.tar.members.json" for s in range(3)]

    scans = CountingTarOpen()
    monkeypatch.setattr(tar_index.tarfile, "open", scans)
    listed, built = sources.TarShards(pattern), sources.TarShards(str(d / "manifest.json"))
    assert scans.calls == 0  # the manifest touches no shard; the pattern takes each shard's sidecar
    assert len(built) == len(listed) == 60 and built.shard_sizes == [20, 20, 20] and built.urls == listed.urls
    assert [built.ref(i) for i in range(60)] == [listed.ref(i) for i in range(60)]  # locations and labels
    assert all(built.read(built.ref(i)) == listed.read(listed.ref(i)) for i in range(60))
    assert scans.calls == 0
    for kw in ({}, {"read": "shard", "buffer_shards": 2}):
        a, b = (sources.TarShards(src, **kw) for src in (pattern, str(d / "manifest.json")))
        with (
            HybridLoader(a, REC, 8, seed=3, return_indices=True, policy=LoaderPolicy(cpu_actors=0, threads=2)) as la,
            HybridLoader(b, REC, 8, seed=3, return_indices=True, policy=LoaderPolicy(cpu_actors=0, threads=2)) as lb,
        ):
            assert stream(lb, (0, 1)) == stream(la, (0, 1))


def test_building_from_a_manifest_touches_no_shard(tmp_path):
    doc = {"wids_version": 1, "shardlist": [{"url": f"gone-{s}.tar", "nsamples": 1000} for s in range(5000)]}
    (tmp_path / "m.json").write_text(json.dumps(doc))
    src = sources.TarShards(str(tmp_path / "m.json"))  # none of these shards exists
    assert len(src) == 5_000_000 and src.urls[4999] == str(tmp_path / "gone-4999.tar")
    with pytest.raises(
        ShardIndexError, match=r"shard 4321 \('.*gone-4321.tar'\) of manifest .*m.json.* does not exist"
    ):
        src.ref(4_321_999)


def test_relative_urls_resolve_against_the_manifest_or_its_base(tmp_path):
    (tmp_path / "sub").mkdir()
    doc = {
        "wids_version": 1,
        "shardlist": [
            {"url": "../a.tar", "nsamples": 1},
            {"url": "/abs/b.tar", "nsamples": 1},
            {"url": "memory://bucket/c.tar", "nsamples": 1},
        ],
    }
    (tmp_path / "sub" / "m.json").write_text(json.dumps(doc))
    assert sources.TarShards(str(tmp_path / "sub" / "m.json")).urls == [
        str(tmp_path / "a.tar"),
        "/abs/b.tar",
        "memory://bucket/c.tar",
    ]
    fsspec.filesystem("memory").pipe_file(
        "/hl-manifest/set/m.json",
        json.dumps({"wids_version": 1, "base": "shards", "shardlist": [{"url": "x-0.tar", "nsamples": 2}]}).encode(),
    )
    assert sources.TarShards("memory://hl-manifest/set/m.json").urls == ["memory://hl-manifest/set/shards/x-0.tar"]


@pytest.mark.parametrize(
    "text, match",
    [
        (None, r"manifest '.*m.json' does not exist; write it with `hybridload index"),
        ("{not json", r"manifest '.*m.json' is not valid JSON"),
        ('{"wids_version": 1}', r"has no \"shardlist\" list"),
        ('{"wids_version": 2, "shardlist": []}', r"wids_version=2"),
        (
            '{"shardlist": [{"url": "a.tar", "nsamples": 3}, {"url": "b.tar"}]}',
            r"shardlist\[1\] \('b.tar'\) has nsamples=None",
        ),
        ('{"shardlist": [{"nsamples": 3}]}', r"shardlist\[0\] .* needs a \"url\" string"),
        ('{"shardlist": []}', r"lists no shards"),
    ],
)
def test_a_bad_manifest_is_a_named_error(tmp_path, text, match):
    if text is not None:
        (tmp_path / "m.json").write_text(text)
    with pytest.raises(ManifestError, match=match):
        sources.TarShards(str(tmp_path / "m.json"))


def test_a_count_that_disagrees_with_the_shard_stops_the_epoch_by_name(shards):
    d, pattern = shards
    assert index(pattern, d / "m.json", "--workers", "1") == 0
    doc = json.loads((d / "m.json").read_text())
    doc["shardlist"][1]["nsamples"] = 21  # one sample more than the shard holds: a shifted epoch
    (d / "m.json").write_text(json.dumps(doc))
    src = sources.TarShards(str(d / "m.json"))
    assert len(src) == 61 and src.read(src.ref(0))[0]  # shard 0 agrees
    with pytest.raises(
        ShardIndexError,
        match=r"shard 1 .*shard-001.tar.* holds 20 samples but the manifest says "
        r"nsamples=21; reading on would give a short or shifted epoch",
    ):
        src.ref(25)
    # also under on_error="skip": never a silently short or shifted epoch
    with HybridLoader(src, REC, 8, shuffle=False, policy=LoaderPolicy(cpu_actors=0, threads=1, on_error="skip")) as ld:
        with pytest.raises(ShardIndexError, match="nsamples=21"):
            list(ld)


def test_a_stale_sidecar_is_ignored_and_the_shard_scanned(shards, folder, caplog):  # noqa: F811
    d, pattern = shards
    assert index(pattern, d / "m.json", "--workers", "1") == 0
    data = folder.read(folder.ref(0))[0]
    write_shard(d / "shard-002.tar", [(f"n{i}.jpg", data) for i in range(20)])  # rewritten: another size
    src = sources.TarShards(str(d / "m.json"))
    assert src.ref(45).location.endswith("shard-002.tar#n5.jpg") and src.read(src.ref(45))[0] == data
    assert "written for a shard of" in caplog.text


def test_each_process_holds_at_most_index_cache_shards(shards):
    d, pattern = shards
    assert index(pattern, d / "m.json", "--workers", "1") == 0
    src = sources.TarShards(str(d / "m.json"), index_cache=2)
    assert src.held_indexes() == []
    for i in (0, 20, 40):
        src.read(src.ref(i))
    assert src.held_indexes() == [1, 2]
    src.ref(5)
    assert src.held_indexes() == [2, 0]
    clone = pickle.loads(pickle.dumps(src))
    assert clone.held_indexes() == [] and clone.read(clone.ref(59)) == src.read(src.ref(59))
    listed = sources.TarShards(pattern, index_cache=1)  # a scanned pattern keeps the last shard only
    assert listed.held_indexes() == [2]
    with pytest.raises(ValueError, match="index_cache must be an int >= 1"):
        sources.TarShards(pattern, index_cache=0)


def test_the_pickled_source_grows_with_shards_not_samples(tmp_path):
    def pickled(shards, per_shard):
        doc = {
            "wids_version": 1,
            "shardlist": [
                {"url": f"s3://bucket/train/shard-{s:07d}.tar", "nsamples": per_shard} for s in range(shards)
            ],
        }
        (tmp_path / "m.json").write_text(json.dumps(doc))
        src = sources.TarShards(str(tmp_path / "m.json"))
        clone = pickle.loads(pickle.dumps(src))
        assert len(clone) == shards * per_shard and clone.urls == src.urls
        return len(pickle.dumps(src))

    small, many_samples, many_shards = pickled(1000, 10), pickled(1000, 100_000), pickled(20_000, 10)
    assert many_samples < small + 200  # 10^4 times the samples: the same bytes
    assert many_shards < 20 * small and many_shards / 20_000 < 16  # O(shards), a few bytes each


def test_a_large_pattern_without_a_manifest_hints_at_writing_one(shards, monkeypatch):
    monkeypatch.setattr(shard_scan, "MANIFEST_HINT_SHARDS", 2)
    with pytest.warns(UserWarning, match=r"scanning 3 shards .* `hybridload index PATTERN -o manifest.json`"):
        sources.TarShards(shards[1])


def test_index_resumes_from_its_partial_output_and_reports_failed_shards(shards, monkeypatch, capsys):
    d, pattern = shards
    out = d / "m.json"
    (d / "shard-001.tar").rename(d / "held.tar")
    assert index(pattern, out, "--workers", "1") == 2  # one shard missing: no manifest, the rest kept
    assert "1 of 3 shards could not be indexed (first: " in capsys.readouterr().err and not out.exists()
    partial = [json.loads(line) for line in (d / "m.json.partial").read_text().splitlines()]
    assert sorted(e["url"] for e in partial) == [str(d / "shard-000.tar"), str(d / "shard-002.tar")]
    (d / "held.tar").rename(d / "shard-001.tar")
    scans = CountingTarOpen()
    monkeypatch.setattr(tar_index.tarfile, "open", scans)
    assert index(pattern, out, "--workers", "1") == 0  # threads: the scans are counted here
    assert scans.calls == 1, "a resumed run scans only the shards the partial output lacks"
    assert [e["nsamples"] for e in json.loads(out.read_text())["shardlist"]] == [20, 20, 20]
    assert not os.path.exists(str(out) + ".partial")


def test_index_over_urls_uses_threads_and_writes_sidecars_beside_the_shards(shards, tmp_path):
    d, pattern = shards
    fs = fsspec.filesystem("memory")
    for s in range(3):
        fs.pipe_file(f"/hl-index/shard-{s:03d}.tar", (d / f"shard-{s:03d}.tar").read_bytes())
    try:
        assert index("memory://hl-index/shard-{000..002}.tar", tmp_path / "m.json") == 0
        assert fs.exists("/hl-index/shard-001.tar.members.json")
        remote, local = sources.TarShards(str(tmp_path / "m.json")), sources.TarShards(pattern)
        assert remote.urls[0] == "memory://hl-index/shard-000.tar" and remote.shard_sizes == [20, 20, 20]
        assert all(remote.read(remote.ref(i)) == local.read(local.ref(i)) for i in range(0, 60, 7))
    finally:
        fs.rm("/hl-index", recursive=True)


def test_a_sidecar_that_cannot_be_written_still_counts_its_shard(shards, monkeypatch, caplog):
    """A read-only bucket refuses the sidecar; this box runs as root, which no permission stops,
    so the refusal is injected (threads: the write runs in this process)."""
    from hybridload.sources._tar import tar_index  # `index` imports write_sidecar from there when it runs

    def refuse(url, *a, **kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tar_index, "write_sidecar", refuse)
    d, pattern = shards
    assert index(pattern, d / "m.json", "--workers", "1") == 0
    assert [e["nsamples"] for e in json.loads((d / "m.json").read_text())["shardlist"]] == [20, 20, 20]
    assert "3 sidecar index(es) could not be written (first: " in caplog.text and "Permission denied" in caplog.text
    assert not list(d.glob("*.members.json"))


def test_streamed_shards_without_sidecars_are_indexed_from_their_one_whole_read(shards, tmp_path):
    from support.slowfs import SlowMemoryFileSystem

    d, pattern = shards
    fs = fsspec.filesystem("memory")
    for s in range(3):
        fs.pipe_file(f"/hl-stream/shard-{s:03d}.tar", (d / f"shard-{s:03d}.tar").read_bytes())
    doc = {
        "wids_version": 1,
        "shardlist": [{"url": f"slowmem://hl-stream/shard-{s:03d}.tar", "nsamples": 20} for s in range(3)],
    }
    (tmp_path / "m.json").write_text(json.dumps(doc))
    try:
        SlowMemoryFileSystem.reset_counts()
        src, local = sources.TarShards(str(tmp_path / "m.json"), read="shard"), sources.TarShards(pattern)
        assert SlowMemoryFileSystem.counts()["requests"] == 0  # built touching no shard
        assert all(src.read(src.ref(i)) == local.read(local.ref(i)) for i in range(60))
        # per shard: the sidecar asked for (there is none) and one whole read, scanned for the index too
        assert SlowMemoryFileSystem.counts()["requests"] == 6 and src.shard_fetches == 3
    finally:
        fs.rm("/hl-stream", recursive=True)


def test_index_usage_mistakes_are_one_line_with_status_2(tmp_path, capsys):
    assert index("x-{0..", tmp_path / "m.json") == 2
    assert "hybridload index: PATTERN: unbalanced braces" in capsys.readouterr().err
    assert index(str(tmp_path / "x-{0..1}.tar"), tmp_path / "no" / "m.json") == 2
    assert "its directory does not exist" in capsys.readouterr().err
