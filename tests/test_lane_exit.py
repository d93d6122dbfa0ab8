"""A loader's threads and processes end when their work does: no lane thread left inside torch at
interpreter exit after close() (issue 35.14), no worker process outliving a trainer killed
abruptly (35.24) nor any process of its embedded Ray cluster (44.11), and no batch of a given-up
pass holding back the next pass (35.8)."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from hybridload.raycluster._agent_guard import children, start_time

HERE = os.path.dirname(os.path.abspath(__file__))

BREAK_AFTER_TWO_STEPS = textwrap.dedent("""
    import threading, time
    import numpy as np
    import torch
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources

    class TorchWork:
        # each sample runs 0.25 s of torch ops (C++, the GIL released), as a large image's decode and resize
        def __len__(self):
            return 256

        def __getitem__(self, i):
            a, t0 = torch.ones(200, 200), time.perf_counter()
            while time.perf_counter() - t0 < 0.25:
                a = (a @ a).clamp_(0, 1)
            return np.full((40, 40, 3), i % 256, np.uint8), i

    policy = LoaderPolicy(local_workers="threads", threads=1, cpu_actors=0)
    with HybridLoader(sources.TorchDataset(TorchWork()), recipe.imagenet_eval(32), 12, shuffle=False,
                      device="cpu", policy=policy) as loader:  # a batch: 3 s of torch, longer than close() waits
        for step, _ in enumerate(loader):
            if step == 1:
                break
    print("LEFT", [t.name for t in threading.enumerate() if t.name.startswith("hybridload")], flush=True)
""")


def test_close_leaves_no_lane_thread_and_the_process_exits_0():
    """5 runs at once of the user's `with HybridLoader(...threads=1) as loader:` + `break`: each
    exits 0 with no lane thread left (before: rc 134, 'terminate called without an active exception')."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BREAK_AFTER_TWO_STEPS],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONPATH": HERE},
        )
        for _ in range(5)
    ]
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=180)
            outs.append((p.returncode, out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    for rc, out in outs:
        assert rc == 0 and "LEFT []" in out, f"rc {rc}:\n{out[-3000:]}"


KILLED_TRAINER = textwrap.dedent("""
    import sys
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources
    if START == "ray-embedded":  # Ray's embedded cluster in this process: GCS, raylet, its agents, actors
        policy = LoaderPolicy(ray_address="embedded", cpu_actors=1, reserve_local_cpus=1)
    else:
        policy = LoaderPolicy(local_workers="processes", threads=2, cpu_actors=0, start_method=START)
    loader = HybridLoader(sources.ImageFolder(sys.argv[1]), recipe.imagenet_eval(32), 4, device="cpu", policy=policy)
    next(iter(loader))
    print("READY", flush=True)
    sys.stdin.read()  # until the test kills this process
""")


def _descendants(pid: int) -> list[int]:
    out, todo = [], children(pid)
    while todo:
        k = todo.pop()
        out.append(k)
        todo += children(k)
    return out


def _alive(pid: int, born: int | None = None) -> bool:
    now = start_time(pid)
    return now is not None and (born is None or now == born)


@pytest.mark.parametrize("start", ["fork", "forkserver", "ray-embedded"])
def test_every_descendant_of_a_killed_trainer_exits_within_10_s(photo_root, start):
    """SIGKILL the trainer (as the OOM killer does): every process it started (process-lane workers, a
    forkserver's helpers; Ray's embedded cluster: GCS, raylet, its dashboard and runtime env agents,
    actors) is gone within 10 s; Ray's two agents, left to themselves, spend 60 s reporting the raylet's
    death to a GCS already gone (~190 MB)."""
    script = f"START = {start!r}\n" + KILLED_TRAINER
    with tempfile.TemporaryDirectory(prefix="hl", dir="/tmp") as tmp:  # Ray's session files: the test's own
        proc = subprocess.Popen(
            [sys.executable, "-c", script, photo_root],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": HERE, "RAY_TMPDIR": tmp, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
            start_new_session=True,
        )
        born: dict[int, int | None] = {}
        try:
            line = ""
            deadline = time.monotonic() + 180
            while "READY" not in line and time.monotonic() < deadline and proc.poll() is None:
                line = proc.stdout.readline()
            assert "READY" in line, proc.stderr.read()[-3000:] if proc.poll() is not None else "no first batch in 180 s"
            born = {k: start_time(k) for k in _descendants(proc.pid)}
            names = {k: open(f"/proc/{k}/cmdline", "rb").read()[:80] for k in born if _alive(k)}
            assert born, "the trainer started no process"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            deadline = time.monotonic() + 10
            while any(_alive(k, t) for k, t in born.items()) and time.monotonic() < deadline:
                time.sleep(0.2)
            left = [k for k, t in born.items() if _alive(k, t)]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            for k, t in born.items():  # do not leak them from the test either (by pid, still the same process)
                if _alive(k, t):
                    os.kill(k, signal.SIGKILL)
    assert not left, f"processes {[(k, names.get(k)) for k in left]} outlived their killed trainer by 10 s"


class _SleepySamples:
    """Each sample takes 0.25 s (a slow storage read); the thread waits, releasing the GIL."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        import numpy as np

        time.sleep(0.25)
        return np.full((40, 40, 3), i, np.uint8), i


@pytest.mark.parametrize("workers", ["threads", "processes"])
def test_a_given_up_pass_does_not_hold_back_the_next_passs_first_batch(workers):
    """A pass left after one batch: its queued batches are dropped and its running ones stop at
    their next sample, so the next epoch's first batch takes about one batch's time (2 s), not
    the old pass's batches first (before: 6.0 s with threads)."""
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources

    policy = LoaderPolicy(local_workers=workers, threads=1, cpu_actors=0, start_method="fork")
    with HybridLoader(
        sources.TorchDataset(_SleepySamples()), recipe.imagenet_eval(32), 8, device="cpu", policy=policy
    ) as ld:
        next(iter(ld))  # one batch, and the pass is given up with one batch running and one queued
        ld.set_epoch(1)
        t0 = time.monotonic()
        next(iter(ld))
        took = time.monotonic() - t0
    assert took < 3.5, f"the next pass's first batch took {took:.1f} s (one batch: 2 s)"
