"""A small generated dataset for the examples: (float tensor image, label) pairs."""

import torch
from torch.utils.data import Dataset


class ToyImages(Dataset):
    """Deterministic 3x32x32 images; item ``i`` has label ``i % 10``. Cheap to pickle to actors."""

    def __init__(self, n: int = 256):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.rand(3, 32, 32, generator=g), i % 10


def small_model():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10))
