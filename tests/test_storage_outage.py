"""An outage is not bad data: a read the storage fails is retried with backoff, then raised as
StorageError naming the sample, under on_error="skip" too (a real S3-compatible server, moto,
on 127.0.0.1, killed mid-epoch); bad data skipped past skip_warn_fraction of a pass warns once
per pass; stats() keeps skips by stage."""

import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hybridload import HybridLoader, LoaderPolicy, StorageError, recipe, sources
from hybridload.errors import SampleError, ShardIndexError
from hybridload.sources._read_retry import ReadRetry, ReadsExhausted, with_retries

REC = recipe.imagenet_train(32)
N, BATCH = 48, 4
CREDS = {"key": "test", "secret": "test"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def s3_server():
    """A moto S3 server in its own process on 127.0.0.1, holding N small JPEGs in bucket
    ``photos`` (labels = index % 7): (process, storage_options for s3fs)."""
    pytest.importorskip("moto.server", reason="the dev extra installs moto[server]")
    s3fs = pytest.importorskip("s3fs", reason="the dev extra installs s3fs")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail(f"moto server did not listen on 127.0.0.1:{port} within 60 s")
                time.sleep(0.1)
        # the storage clients' own retries off, so the test sees the source's ReadRetry alone
        opts = {
            "endpoint_url": f"http://127.0.0.1:{port}",
            "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2, "read_timeout": 5},
            **CREDS,
        }
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **opts)
        fs.mkdir("photos")
        rng = np.random.default_rng(0)
        for i in range(N):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(buf, "JPEG")
            fs.pipe(f"photos/{i}.jpg", buf.getvalue())
        yield proc, opts
    finally:
        proc.kill()
        proc.wait(timeout=30)


LANES = {
    "threads": dict(cpu_actors=0, threads=1, local_workers="threads"),
    "processes": dict(cpu_actors=0, threads=1, local_workers="processes"),
    "ray": dict(ray_address="embedded", mode="cpu", cpu_actors=2, reserve_local_cpus=1),  # actors on other nodes
}


@pytest.mark.parametrize("lane", list(LANES))
def test_storage_killed_mid_epoch_raises_storage_error_not_skips(s3_server, lane, request):
    if lane == "ray":
        request.getfixturevalue("ray_cluster")
    proc, opts = s3_server
    retry = ReadRetry(attempts=3, backoff_s=0.05)
    src = sources.FileList(
        [f"s3://photos/{i}.jpg" for i in range(N)],
        [i % 7 for i in range(N)],
        storage_options=opts,
        io_threads=4,
        read_retry=retry,
    )
    pol = LoaderPolicy(window=2, on_error="skip", batch_timeout_s=60, **LANES[lane])
    seen = []
    with HybridLoader(src, REC, BATCH, shuffle=False, policy=pol, return_indices=True) as ld:
        with pytest.raises(StorageError) as info:
            for _img, labels, idx in ld:
                seen.append((idx.tolist(), labels.tolist()))
                if len(seen) == 2:
                    proc.kill()
                    proc.wait(timeout=30)
        st = ld.stats()
    err = info.value
    delivered = [i for idx, _ in seen for i in idx]
    assert delivered == list(range(len(delivered))) and len(delivered) < N  # in order, then it stopped
    assert all(lab == [i % 7 for i in idx] for idx, lab in seen)  # what came before is right
    assert err.stage == "read" and err.index >= len(delivered) and err.path == f"s3://photos/{err.index}.jpg"
    assert err.attempts == 3 and "on_error='skip' does not skip it" in str(err)
    assert isinstance(err, SampleError)  # `except SampleError` still catches it
    assert st["skipped"] == 0  # nothing was passed off as a zero image


def test_missing_object_is_bad_data_skipped_without_retry(s3_server):
    _proc, opts = s3_server
    retry = ReadRetry(attempts=5, backoff_s=2.0)  # a retry would take 30 s: the test would notice
    paths = [f"s3://photos/{i}.jpg" for i in range(8)]
    paths[5] = "s3://photos/no-such-key.jpg"
    src = sources.FileList(paths, list(range(8)), storage_options=opts, read_retry=retry)
    t0 = time.monotonic()
    with HybridLoader(
        src,
        REC,
        BATCH,
        shuffle=False,
        policy=LoaderPolicy(cpu_actors=0, threads=1, on_error="skip", skip_warn_fraction=1.0),
    ) as ld:
        batches = list(ld)
        st = ld.stats()
    assert time.monotonic() - t0 < 20
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert batches[1][0][1].eq(0).all() and st["skipped_by_stage"] == {"read": 1}


def test_read_retry_tries_again_after_backoff_and_gives_up_with_the_count():
    calls = []

    def flaky():
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise ConnectionResetError(104, "Connection reset by peer")
        return b"bytes"

    assert with_retries(flaky, ReadRetry(attempts=3, backoff_s=0.05), "s3://b/k") == b"bytes"
    assert len(calls) == 3 and calls[2] - calls[1] >= 0.09  # the second pause doubles the first

    def down():
        raise TimeoutError("read timed out")

    with pytest.raises(ReadsExhausted) as info:
        with_retries(down, ReadRetry(attempts=2, backoff_s=0.0), "s3://b/k")
    assert info.value.attempts == 2 and isinstance(info.value.cause, TimeoutError)

    missing = []
    with pytest.raises(FileNotFoundError):  # the sample's own problem: not tried again
        with_retries(lambda: missing.append(1) or open("/nonexistent/x.jpg", "rb"), ReadRetry(), "x")
    assert missing == [1]


def test_storage_error_keeps_its_fields_across_pickling():
    import pickle

    err = pickle.loads(pickle.dumps(StorageError(7, "s3://b/7.jpg", "EndpointConnectionError: refused", 4, 1.25)))
    assert (err.index, err.path, err.stage, err.attempts, err.seconds) == (7, "s3://b/7.jpg", "read", 4, 1.25)
    assert err.reason == "EndpointConnectionError: refused" and "failed 4 times" in str(err)


@pytest.mark.parametrize("bad, fraction", [(3, 0.1), (3, 0.25), (1, 0.0)])
def test_skips_past_the_fraction_warn_once_per_pass_and_at_its_end_the_final_count(
    photo_root, bad_files, bad, fraction
):
    paths = list(sources.ImageFolder(photo_root).paths[:16])
    for k in range(bad):
        paths[2 + 5 * k] = bad_files["truncated"]
    src = sources.FileList(paths, list(range(16)))
    pol = LoaderPolicy(cpu_actors=0, threads=1, on_error="skip", skip_warn_fraction=fraction)
    with HybridLoader(src, REC, 4, shuffle=False, policy=pol) as ld:
        for _epoch in range(2):
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter("always")
                assert len(list(ld)) == 4
            alarms = [w for w in got if "on_error='skip' replaced" in str(w.message)]
            crossed = int(fraction * 16) + 1  # warned when the count first passed the fraction
            assert len(alarms) == (0 if bad < crossed else 1 if bad == crossed else 2)
            if alarms:
                assert f"replaced {crossed} of this pass's 16 samples with zero images so far" in str(alarms[0].message)
            if len(alarms) == 2:  # and the pass's final count when it ends
                assert f"replaced {bad} of this pass's 16 samples with zero images in all" in str(alarms[1].message)
        st = ld.stats()
    assert st["skipped"] == 2 * bad and st["skipped_by_stage"] == {"Decode": 2 * bad}


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan"), "1%", True])
def test_skip_warn_fraction_is_validated(value):
    with pytest.raises(ValueError, match="skip_warn_fraction must be a fraction in \\[0, 1\\]"):
        LoaderPolicy(skip_warn_fraction=value)


def test_a_local_dataset_moved_mid_epoch_stops_the_pass_not_zeros(photo_root, tmp_path):
    root = tmp_path / "photos"
    shutil.copytree(photo_root, root)
    src = sources.ImageFolder(str(root))
    one = Path(src.paths[0])
    one.unlink()  # one file missing, its directory there: one bad file, skippable
    with pytest.raises(SampleError) as info:
        src.read(src.ref(0))
    assert not isinstance(info.value, StorageError)
    pol = LoaderPolicy(cpu_actors=0, threads=1, window=1, on_error="skip")
    with HybridLoader(src, REC, 4, shuffle=False, policy=pol) as ld:
        it = iter(ld)
        next(it)
        os.rename(root, tmp_path / "moved")  # the whole tree gone (a mount lost looks the same)
        with pytest.raises(
            StorageError,
            match=r"its directory .* is gone too \(moved, deleted or unmounted\): a "
            r"storage outage, not one bad file",
        ) as info:
            for _ in it:
                pass
        assert ld.stats()["skipped"] <= 1  # the one missing file, never the outage's samples


def test_a_shard_deleted_after_first_touch_stops_the_pass_under_skip(tmp_path, photo_root):
    from test_tarshards import write_shard

    files = sorted(str(p) for p in Path(photo_root).rglob("*.jpg"))[:12]
    shard = write_shard(tmp_path / "s.tar", [(f"k{i}.jpg", open(f, "rb").read()) for i, f in enumerate(files)])
    src = sources.TarShards(shard)
    pol = LoaderPolicy(cpu_actors=0, threads=1, window=1, on_error="skip")
    with HybridLoader(src, REC, 4, shuffle=False, policy=pol) as ld:
        it = iter(ld)
        next(it)
        os.remove(shard)
        with pytest.raises(ShardIndexError, match=r"FileNotFoundError.* readable when this process indexed it"):
            for _ in it:
                pass
        assert ld.stats()["skipped"] == 0


def test_a_directory_made_unreadable_is_an_outage_while_an_unreadable_file_is_bad_data(photo_root):
    # root reads through any permission: the reads then run as user nobody (setpriv), as a user's would
    d = Path(tempfile.mkdtemp(prefix="hl-perm-"))
    try:
        d.chmod(0o755)
        (d / "cls").mkdir()
        jpg = sorted(Path(photo_root).rglob("*.jpg"))[0]
        for name in ("a.jpg", "b.jpg"):
            shutil.copy(jpg, d / "cls" / name)
        (d / "cls" / "b.jpg").chmod(0o000)
        code = (
            "import sys\nfrom hybridload import sources\nfrom hybridload.errors import StorageError\n"
            "src = sources.FileList(sys.argv[1:], [0, 0])\n"
            "for i in (1, 0):\n"
            "    try:\n        src.read(src.ref(i))\n"
            "    except Exception as e:\n        print(i, type(e).__name__, isinstance(e, StorageError), e)\n"
        )
        argv = [sys.executable, "-c", code, str(d / "cls" / "a.jpg"), str(d / "cls" / "b.jpg")]
        if os.geteuid() == 0:
            if shutil.which("setpriv") is None:
                pytest.skip("running as root without setpriv: no way to read as an ordinary user")
            argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
        one = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd="/")
        assert one.stdout.startswith("1 SampleError False"), one.stdout + one.stderr  # one bad file: skippable
        (d / "cls").chmod(0o000)  # now the directory: every file in it fails, an outage
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd="/").stdout
        assert out.splitlines()[-1].startswith("0 StorageError True") and "cannot be listed (Permission denied)" in out
    finally:
        (d / "cls").chmod(0o755)
        shutil.rmtree(d)


def test_a_bucket_prefix_emptied_mid_epoch_stops_the_pass_not_zeros(s3_server):
    _proc, opts = s3_server
    import s3fs

    paths = [f"s3://photos/{i}.jpg" for i in range(16)]
    src = sources.FileList(paths, list(range(16)), storage_options=opts, read_retry=ReadRetry(attempts=1))
    pol = LoaderPolicy(cpu_actors=0, threads=1, window=1, on_error="skip")
    with HybridLoader(src, REC, BATCH, shuffle=False, policy=pol) as ld:
        it = iter(ld)
        next(it)
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **opts)
        fs.rm(fs.find("photos"))  # every object under the prefix gone (the bucket stays)
        with pytest.raises(
            StorageError,
            match=r"nothing is left under s3://photos/ either \(deleted or moved\): a "
            r"storage outage, not one bad file",
        ):
            for _ in it:
                pass
        assert ld.stats()["skipped"] == 0
