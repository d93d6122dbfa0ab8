"""Ray actors of the drop-in DataLoader killed while they hold a batch, on the shared 3-node
loopback cluster: kills from outside (SIGKILL, as a soak or the OOM killer sends) cost time, not
the pass; a batch that kills every worker it meets, with or without a crash signal, ends in
`WorkerLost` with ``batch_at_fault`` (the segfault case: tests/test_dataloader_edges.py)."""

import os
import re
import signal
import threading
import time

import torch
from torch.utils.data import Dataset

import hybridload
from hybridload.lanes._ray.deaths import DEATHS_TO_FAIL
from support.datasets import third_batch_error


class HoldsSample4(Dataset):
    """Sample 4 (batch 2 at batch_size 2) notes its worker's pid in ``marks`` and waits there
    until ``marks/go`` exists (60 s at most), so a test kills the workers holding that batch."""

    def __init__(self, marks: str):
        self.marks = marks

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 4:
            open(os.path.join(self.marks, f"pid-{os.getpid()}"), "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(os.path.join(self.marks, "go")) and time.monotonic() < deadline:
                time.sleep(0.05)
        return torch.tensor([i, i * i])


def kill_holders(marks: str, count: int, killed: list[int], timeout_s: float = 150) -> None:
    """SIGKILL the first ``count`` workers that note themselves in ``marks``, then let the next go."""
    deadline = time.monotonic() + timeout_s
    while len(killed) < count and time.monotonic() < deadline:
        for name in sorted(os.listdir(marks)):
            pid = int(name[4:])
            if pid not in killed and len(killed) < count:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        time.sleep(0.05)
    open(os.path.join(marks, "go"), "w").close()


def test_two_outside_kills_of_the_workers_holding_one_batch_cost_time_not_the_pass(ray_cluster, tmp_path):
    kw = dict(batch_size=2, sampler=list(range(8)))
    expected = [b.tolist() for b in torch.utils.data.DataLoader([torch.tensor([i, i * i]) for i in range(8)], **kw)]
    killed: list[int] = []
    killer = threading.Thread(target=kill_holders, args=(str(tmp_path), 2, killed), daemon=True)
    killer.start()
    try:
        with hybridload.DataLoader(
            HoldsSample4(str(tmp_path)), distribute_mode=True, num_workers=2, timeout=120, **kw
        ) as loader:  # timeout: the deadline of every next()
            got = [b.tolist() for b in loader]
            retries = loader.stats()["retries"]
    finally:
        open(tmp_path / "go", "w").close()
        killer.join(timeout=30)
    assert len(set(killed)) == 2, killed  # two workers died holding batch 2
    assert got == expected  # each sample once, in torch's order: the batch was not blamed
    assert retries >= 1  # handed on (a copy issued again, as a straggler, may carry it instead)


def test_a_batch_that_sigkills_every_worker_ends_in_worker_lost_after_the_larger_count(ray_cluster):
    error, took = third_batch_error(signal.SIGKILL)
    msg = str(error)
    assert error.batch_at_fault, msg
    assert re.search(r"DataLoader worker \(pid \d+\) exited unexpectedly", msg), msg  # torch's words
    said = re.search(r"batch 2 killed (\d+) workers \(pids ([\d, ]+)\)", msg)
    assert said and int(said.group(1)) == DEATHS_TO_FAIL, msg  # delivered at the fourth, even while a copy runs
    assert len(set(said.group(2).split(", "))) == int(said.group(1)), msg  # each pid named once
    assert "none by a crash signal" in msg, msg
    assert took < 110, took  # worker starts, never the loader's timeout


CRASHES_PAST_SILENCED_STDERR = """
import ctypes, os, sys
from hybridload import _compat as compat
from hybridload.lanes._ray import worker
compat.ray_node_logs_dir = lambda: sys.argv[1]
keep = worker.record_crashes()
print(os.getpid(), flush=True)
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 2)
ctypes.string_at(0)
"""


def test_a_pool_worker_records_its_crash_signal_in_its_crash_file_past_a_silenced_stderr(tmp_path):
    """A worker's side of reading a crash: faulthandler writes the signal on a descriptor of its
    own, though stderr was pointed at /dev/null before the crash (torch's test_segfault)."""
    import subprocess
    import sys

    from hybridload.lanes._ray.deaths import crash_file

    proc = subprocess.run(
        [sys.executable, "-c", CRASHES_PAST_SILENCED_STDERR, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -signal.SIGSEGV, (proc.returncode, proc.stderr[-2000:])
    assert proc.stderr == ""  # nothing reached stderr
    pid = int(proc.stdout.split()[0])
    assert "Fatal Python error: Segmentation fault" in open(crash_file(str(tmp_path), pid)).read()
