"""The process lane: the same stream as the in-process lane, errors as exceptions, clean shutdown."""

import os
import signal
import threading

import numpy as np
import pytest

from hybridload import recipe, sources
from hybridload.errors import SampleError, WorkerLost
from hybridload.lanes.base import BatchTask
from hybridload.lanes.process_lane import ProcessLane
from streams import local_lane_streams

REC = recipe.imagenet_train(48)


def test_process_lane_stream_is_bit_identical_to_the_in_process_lane(photo_root):
    runs, lanes = local_lane_streams(sources.ImageFolder(photo_root), REC, 7, seed=5, epochs=(0, 1), threads=2)
    assert {w: d.startswith("process lane") for w, d in lanes.items()} == {"threads": False, "processes": True}
    assert runs["processes"] == runs["threads"] and len(runs["threads"]) == 18


def test_a_bad_sample_comes_back_as_sample_error_with_its_fields(photo_root, bad_files):
    src = sources.FileList([os.path.join(photo_root, p) for p in _some(photo_root, 3)] + [bad_files["truncated"]])
    lane = ProcessLane(src, REC, seed=0, workers=1, batch_size=4)
    try:
        with pytest.raises(SampleError) as info:
            lane.run_batch(BatchTask(0, 0, np.arange(4)))
        assert info.value.index == 3 and info.value.path == bad_files["truncated"] and info.value.stage
        assert lane.run_batch(BatchTask(1, 0, np.arange(3))).images.shape[0] == 3  # the worker carries on
    finally:
        lane.close()


def test_a_dead_worker_ends_its_batch_in_worker_lost_and_is_replaced(photo_root):
    lane = ProcessLane(sources.ImageFolder(photo_root), REC, seed=0, workers=1, batch_size=4)
    try:
        lane.run_batch(BatchTask(0, 0, np.arange(4)))
        got, ev = [], threading.Event()
        os.kill(lane._procs[0].pid, signal.SIGKILL)
        lane.submit(BatchTask(1, 0, np.arange(4)), lambda t, out: (got.append(out), ev.set()))
        assert ev.wait(30), "no report for the dead worker's batch"
        assert isinstance(got[0], WorkerLost) and "died" in str(got[0])
        assert lane.run_batch(BatchTask(2, 0, np.arange(4))).images.shape[0] == 4
    finally:
        lane.close()


def test_close_stops_every_worker_and_frees_the_slots(photo_root):
    lane = ProcessLane(sources.ImageFolder(photo_root), REC, seed=0, workers=2, batch_size=4)
    lane.run_batch(BatchTask(0, 0, np.arange(4)))
    procs, names = list(lane._procs), [s.name for s in lane._shm]
    lane.close()
    lane.close()  # idempotent
    assert all(not p.is_alive() for p in procs)
    assert not any(os.path.exists(f"/dev/shm/{n}") for n in names)
    with pytest.raises(RuntimeError, match="closed"):
        lane.submit(BatchTask(1, 0, np.arange(4)), lambda t, o: None)


def _some(root, n):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
                  if f.endswith(".jpg"))[:n]


def test_a_script_without_a_main_guard_is_told_to_add_one(photo_root, tmp_path):
    """Worker processes import the main script (forkserver): a script with no
    ``if __name__ == "__main__":`` guard kills them; the error says what to write."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(
        "from hybridload import HybridLoader, LoaderPolicy, recipe, sources\n"
        f"src = sources.ImageFolder({str(photo_root)!r})\n"
        "policy = LoaderPolicy(local_workers='processes', threads=1)\n"
        "with HybridLoader(src, recipe.imagenet_train(32), 4, policy=policy, device='cpu') as ld:\n"
        "    next(iter(ld))\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert "WorkerLost" in last and 'if __name__ == "__main__":' in last and 'local_workers="threads"' in last
