"""``hybridload index``: the manifest it writes is usable from wherever it was run, every user
mistake is one line with status 2, and its worker processes never outlive it."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from hybridload import sources
from hybridload.cli import main
from hybridload.cli import _index as index_cmd

import test_tarshards

#: the tar source's shard fixtures, by assignment: an import would need a noqa that `ruff format`
#: moves away from the parameters that use them
folder, shard_dir = test_tarshards.folder, test_tarshards.shard_dir


def index(pattern, out, *extra):
    return main(["index", str(pattern), "-o", str(out), "--quiet", *extra])


def test_a_relative_pattern_with_the_manifest_elsewhere_gives_a_usable_manifest(shard_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(shard_dir.parent)
    (tmp_path / "elsewhere").mkdir()
    out = tmp_path / "elsewhere" / "m.json"
    assert index(f"{shard_dir.name}/shard-{{000..002}}.tar", out, "--workers", "1", "--no-sidecars") == 0
    urls = [e["url"] for e in json.loads(out.read_text())["shardlist"]]
    assert urls == [str(shard_dir / f"shard-{s:03d}.tar") for s in range(3)]  # not cwd-relative
    monkeypatch.chdir(tmp_path)
    src = sources.TarShards(str(out))
    assert len(src) == 60 and src.read(src.ref(59))[0]


def test_a_manifest_directory_that_cannot_be_written_is_one_line_with_status_2(shard_dir, capsys):
    assert index(shard_dir / "shard-000.tar", "/sys/hl-manifest.json", "--workers", "1") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert err.startswith(
        "hybridload index: -o /sys/hl-manifest.json: cannot write /sys/hl-manifest.json.partial "
        "there (Permission denied); pick a directory you can write"
    )


def test_a_pattern_that_names_only_missing_shards_leaves_no_partial_file(tmp_path, capsys):
    assert index(tmp_path / "gone-{0..2}.tar", tmp_path / "m.json", "--workers", "1") == 2
    err = capsys.readouterr().err
    assert "3 of 3 shards could not be indexed (first: " in err and "gone-0.tar" in err.splitlines()[-1]
    assert "no shard was indexed" in err and not (tmp_path / "m.json.partial").exists()


def test_an_out_that_is_a_directory_is_refused_before_any_work_and_leaves_nothing(
    shard_dir, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    assert index(shard_dir / "shard-000.tar", "d", "--workers", "1") == 2
    err = capsys.readouterr().err.strip()
    assert err == "hybridload index: -o d is a directory: -o must be a file path, e.g. -o d/manifest.json", err
    assert sorted(os.listdir(tmp_path)) == ["d"] and not os.listdir(tmp_path / "d")
    assert not os.path.exists(str(shard_dir / "shard-000.tar") + ".members.json")  # refused before any shard


def test_a_manifest_that_cannot_replace_its_out_leaves_no_temporary_file(shard_dir, tmp_path, monkeypatch, capsys):
    from hybridload.sources._tar import manifest

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied", src)

    monkeypatch.setattr(manifest.os, "replace", refuse)
    assert index(shard_dir / "shard-000.tar", tmp_path / "m.json", "--workers", "1", "--no-sidecars") == 2
    err = capsys.readouterr().err
    assert "Permission denied" in err and ".tmp" not in err, err
    assert sorted(os.listdir(tmp_path)) == ["m.json.partial"]  # the counted shard, kept to resume


def test_the_manifest_and_sidecars_are_written_with_the_umasks_mode(shard_dir, tmp_path):
    import shutil

    shutil.copy(shard_dir / "shard-000.tar", tmp_path / "s.tar")
    old = os.umask(0o022)
    try:
        assert index(tmp_path / "s.tar", tmp_path / "m.json", "--workers", "1") == 0
        modes = {p: os.stat(tmp_path / p).st_mode & 0o777 for p in ("m.json", "s.tar.members.json")}
        assert modes == {"m.json": 0o644, "s.tar.members.json": 0o644}
        os.umask(0o077)
        assert index(tmp_path / "s.tar", tmp_path / "m2.json", "--workers", "1") == 0
        assert os.stat(tmp_path / "m2.json").st_mode & 0o777 == 0o600
    finally:
        os.umask(old)


def test_a_glob_pattern_names_its_shards_in_sorted_order(shard_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(shard_dir)
    out = tmp_path / "m.json"
    assert index("shard-*.tar", out, "--workers", "1", "--no-sidecars") == 0
    urls = [e["url"] for e in json.loads(out.read_text())["shardlist"]]
    assert urls == [str(shard_dir / f"shard-{s:03d}.tar") for s in range(3)]
    assert index("nothing-*.tar", tmp_path / "m2.json", "--workers", "1") == 2
    err = capsys.readouterr().err
    assert "'nothing-*.tar' matches no file" in err and "brace pattern" in err, err
    assert index("memory://hl-glob/*.tar", tmp_path / "m3.json", "--workers", "1") == 2
    err = capsys.readouterr().err
    assert "a glob is expanded for local paths only" in err and "brace pattern" in err, err


def test_the_failure_line_names_the_first_failed_shard_in_order_and_counts_in_words():
    urls = [f"s-{i}.tar" for i in range(4)]
    line = index_cmd.failure_line(urls, [("s-3.tar", "bad three"), ("s-1.tar", "bad one")], 1, "m.json.partial")
    assert line == (
        "2 of 4 shards could not be indexed (first: s-1.tar: bad one); fix them and run the same command "
        "again: the 1 shard indexed is kept in m.json.partial"
    )
    assert "the 2 shards indexed are kept" in index_cmd.failure_line(urls, [("s-0.tar", "x")], 2, "p")


def _children(pid):
    """The pids of ``pid``'s child processes (all its threads' children), from /proc."""
    kids = set()
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.update(int(k) for k in f.read().split())
    except (FileNotFoundError, ProcessLookupError):
        pass
    return kids


def _alive(pid):
    """Running (not gone, not a zombie waiting for its reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; the parent-death signal is Linux's")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_index_worker_processes_end_when_the_command_is_killed(shard_dir, tmp_path, sig):
    for i in range(300):  # enough shards that the workers are busy when the command dies
        os.link(shard_dir / "shard-000.tar", tmp_path / f"s-{i:03d}.tar")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hybridload",
            "index",
            str(tmp_path / "s-{000..299}.tar"),
            "-o",
            str(tmp_path / "m.json"),
            "--workers",
            "2",
            "--quiet",
            "--no-sidecars",
        ],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers = set()
    try:
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
            workers = _children(proc.pid)
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGSTOP)  # hold it mid-run: it must die with its work unfinished
        assert proc.poll() is None and len(workers) == 2, "the command ended before its pool started"
        os.kill(proc.pid, sig)
        os.kill(proc.pid, signal.SIGCONT)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 15
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [w for w in workers if _alive(w)], "index's pool workers outlived it"
    finally:
        for w in workers:  # never leave one behind, even when the test fails
            if _alive(w):
                os.kill(w, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
