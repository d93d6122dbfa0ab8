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
