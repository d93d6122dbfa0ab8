"""The drop-in DataLoader on Ray actors at the edges torch handles: an infinite sampler
(iteration-based training) consumed lazily; a ``collate_fn`` returning a generator. Each case
against torch's own DataLoader on the same arguments, on the shared 3-node loopback cluster."""

import itertools

import pytest
import torch
from torch.utils.data import Dataset, Sampler

import hybridload


class Squares(Dataset):
    def __len__(self):
        return 50

    def __getitem__(self, i):
        return torch.tensor([i, i * i])


class TrainingSampler(Sampler):
    """detectron2's TrainingSampler: an endless stream of shuffled indices, no ``__len__``
    (iteration-based training stops after N steps). It refuses to be drawn past ``limit``
    indices, so a loader that lists it up front fails at once instead of filling memory."""

    def __init__(self, size: int, seed: int = 0, limit: int = 100_000):
        self.size, self.seed, self.limit, self.drawn = size, seed, limit, 0

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        while True:
            for i in torch.randperm(self.size, generator=g).tolist():
                self.drawn += 1
                if self.drawn > self.limit:
                    raise RuntimeError(f"TrainingSampler drawn past {self.limit} indices: listed, not consumed lazily")
                yield i


def test_an_infinite_sampler_gives_torchs_first_batches_drawing_only_the_window_ahead(ray_cluster):
    steps, bs, window = 25, 4, 4
    first = list(itertools.islice(iter(TrainingSampler(50)), steps * bs))
    expected = [torch.stack([Squares()[i] for i in first[k:k + bs]]).tolist() for k in range(0, len(first), bs)]
    sampler = TrainingSampler(50)
    with hybridload.DataLoader(Squares(), batch_size=bs, sampler=sampler, distribute_mode=True, num_workers=2,
                               window=window, timeout=120) as loader:  # timeout: the deadline of every next()
        it = iter(loader)
        got = [next(it).tolist() for _ in range(steps)]
        assert got == expected  # torch's batches, in the sampler's order
        assert sampler.drawn <= (steps + window + 2) * bs  # memory bounded by the window, not the stream
        with pytest.raises(TypeError, match="has no len"):  # as torch: such a pass has no length
            len(it)
