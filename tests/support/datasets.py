"""Datasets the drop-in's worker tests share."""

import os

import torch
from torch.utils.data import Dataset


class KillsItsWorker(Dataset):
    """Eight samples; reading sample 5 sends ``signum`` to the worker's own process, every time:
    SIGSEGV is a crash with its signal in the worker's log, SIGKILL a death with none (as the OOM
    killer's)."""

    def __init__(self, signum: int):
        self.signum = signum

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            os.kill(os.getpid(), self.signum)
        return torch.tensor(i)


def third_batch_error(signum: int):
    """The drop-in on 2 Ray actors over ``KillsItsWorker(signum)`` in order, batches of 2: its
    first two batches (checked), then the `WorkerLost` the third raises and the seconds it took."""
    import time

    import pytest

    import hybridload

    with hybridload.DataLoader(
        KillsItsWorker(signum), batch_size=2, sampler=list(range(8)), distribute_mode=True, num_workers=2, timeout=120
    ) as loader:
        it = iter(loader)
        assert [next(it).tolist() for _ in range(2)] == [[0, 1], [2, 3]]
        t0 = time.monotonic()
        with pytest.raises(hybridload.errors.WorkerLost) as got:
            next(it)
        return got.value, time.monotonic() - t0
