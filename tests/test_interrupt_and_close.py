"""Stopping a loader: Ctrl-C while a sample takes a minute, next() after close(), a loader
dropped without close(), threads sharing one iterator, and error messages naming samples."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

SLOW_SAMPLE = textwrap.dedent("""
    import time
    import numpy as np
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources

    class Slow:
        def __len__(self):
            return 16

        def __getitem__(self, i):
            if i == 9:
                time.sleep(60)  # batch 2 (samples 8..11) takes a minute
            return np.full((40, 40, 3), i, np.uint8), i

    policy = LoaderPolicy(cpu_actors=0, threads=2, local_workers=WORKERS)
    with HybridLoader(sources.TorchDataset(Slow()), recipe.imagenet_eval(32), 4, shuffle=False, policy=policy) as ld:
        for k, _ in enumerate(ld):
            print("GOT", k, flush=True)
""")


def _processes_running(token: str) -> list[int]:
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def _ctrl_c_reaches_python():
    """Ctrl-C as at a terminal: a suite started in the background of a non-interactive shell
    (`make test &`) inherits SIGINT ignored, and Python then never turns it into
    KeyboardInterrupt; the script gets SIGINT's default, so Python installs its own handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("workers", ["threads", "processes"])  # processes: the default local lane from 2 CPUs
def test_ctrl_c_while_a_sample_takes_a_minute_exits_within_seconds(workers):
    token = f"slow-sample-{os.getpid()}-{workers}"  # in the script's text: its forked workers carry it too
    script = f"# {token}\nWORKERS = {workers!r}\n" + SLOW_SAMPLE
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": HERE},
        preexec_fn=_ctrl_c_reaches_python,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"the loader ended early: {proc.stderr.read()[-2000:]}"
            if line.strip() == "GOT 1":
                break
        time.sleep(1.0)  # the consumer now waits for batch 2, whose sample sleeps
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert "KeyboardInterrupt" in err, err[-2000:]
    assert took < 8, f"the process took {took:.1f} s to exit after Ctrl-C"
    deadline = time.monotonic() + 10
    while _processes_running(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _processes_running(token), "a worker outlived the Ctrl-C'd process"


import gc
import logging
import threading

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import SampleError

REC = recipe.imagenet_train(32)
LOCAL = dict(cpu_actors=0, threads=2, local_workers="threads")


def test_a_loader_dropped_without_close_logs_no_lane_failures(photo_root, caplog):
    caplog.set_level(logging.INFO, logger="hybridload")
    for _ in range(3):
        ld = HybridLoader(sources.ImageFolder(photo_root), REC, 2, policy=LoaderPolicy(window=8, **LOCAL))
        it = iter(ld)
        next(it)
        del it, ld
        gc.collect()
    time.sleep(0.5)
    assert "in a row" not in caplog.text and "handing it on" not in caplog.text and "failed" not in caplog.text


def test_next_after_close_raises_an_error_naming_close(photo_root):
    ld = HybridLoader(sources.ImageFolder(photo_root), REC, 4, policy=LoaderPolicy(**LOCAL))
    it = iter(ld)
    next(it)
    ld.close()
    with pytest.raises(RuntimeError, match=r"close\(\)"):
        next(it)


def test_a_finished_pass_keeps_raising_stop_iteration(photo_root):
    with HybridLoader(sources.ImageFolder(photo_root), REC, 30, policy=LoaderPolicy(**LOCAL)) as ld:
        it = iter(ld)
        assert len(list(it)) == 2
        with pytest.raises(StopIteration):
            next(it)


def test_threads_sharing_one_iterator_end_the_epoch_without_error(photo_root):
    with HybridLoader(sources.ImageFolder(photo_root), REC, 2, policy=LoaderPolicy(**LOCAL)) as ld:
        it = iter(ld)
        got, errors = [], []

        def consume():
            try:
                for _, labels in it:
                    got.append(len(labels))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=consume) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        assert errors == [] and sum(got) == 60


def test_a_non_image_names_the_sample_not_a_bytesio_object(photo_root, bad_files, tmp_path):
    os.makedirs(tmp_path / "a")
    with open(tmp_path / "a" / "notes.jpg", "wb") as f:
        f.write(b"these are not pixels " * 20)
    with HybridLoader(sources.ImageFolder(str(tmp_path)), REC, 1, policy=LoaderPolicy(**LOCAL)) as ld:
        with pytest.raises(SampleError) as got:
            next(iter(ld))
    msg = str(got.value)
    assert "BytesIO" not in msg and " at 0x" not in msg
    assert "sample 0" in msg and "notes.jpg" in msg
