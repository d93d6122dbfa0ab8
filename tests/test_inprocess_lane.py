"""The in-process lane's threads and torch's intra-op threads (issue 35.7)."""

import threading

import numpy as np
import torch

from hybridload import recipe, sources
from hybridload.lanes.base import BatchTask
from hybridload.lanes.local.inprocess import InProcessLane


class _SeesThreads:
    """Records torch's intra-op thread count where each sample is read."""

    def __init__(self):
        self.seen = []

    def __len__(self):
        return 8

    def __getitem__(self, i):
        self.seen.append((threading.current_thread().name, torch.get_num_threads()))
        return np.full((40, 40, 3), i, np.uint8), i


def _new_thread_sees() -> int:
    box = []
    t = threading.Thread(target=lambda: box.append(torch.get_num_threads()))
    t.start()
    t.join(30)
    return box[0]


def test_a_one_thread_lane_runs_torch_on_its_own_thread_and_leaves_the_trainers_setting():
    """A one-thread lane on the process's intra-op threads ran 5-12x slower than two lane threads
    (RESULTS.md): its thread runs torch on one intra-op thread; the trainer's thread and threads
    started later keep the process's count."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # as on the 2-core box (the test machine may have more)
    ds = _SeesThreads()
    lane = InProcessLane(sources.TorchDataset(ds), recipe.imagenet_eval(32), threads=1)
    try:
        lane.run_batch(BatchTask(0, 0, np.arange(2)))  # on this thread: the trainer's count
        done = threading.Event()
        lane.submit(BatchTask(1, 0, np.arange(2, 4)), lambda t, out: done.set())
        assert done.wait(60), "the lane's batch did not finish within 60 s"
        lane_counts = {n for name, n in ds.seen if name.startswith("hybridload-inprocess")}
        main_counts = {n for name, n in ds.seen if name == threading.current_thread().name}
        assert lane_counts == {1} and main_counts == {2}, ds.seen
        assert torch.get_num_threads() == 2 and _new_thread_sees() == 2
    finally:
        lane.close()
        torch.set_num_threads(before)
