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


def as_generator(samples):
    """A collate_fn that returns a generator of the batch's samples."""
    return (s * 10 for s in samples)


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(7))


@pytest.mark.parametrize("dataset", [Squares(), Stream()], ids=["map-style", "iterable"])
def test_a_collate_fn_returning_a_generator_delivers_every_sample_as_torch_does(ray_cluster, dataset):
    kw = dict(batch_size=3, collate_fn=as_generator)
    if isinstance(dataset, Squares):
        kw["sampler"] = list(range(8))
    workers = 2 if isinstance(dataset, Squares) else 1  # an iterable dataset that does not split: one worker
    mine_loader = hybridload.DataLoader(dataset, distribute_mode=True, num_workers=workers, timeout=120, **kw)
    torchs = [list(b) for b in torch.utils.data.DataLoader(dataset, **kw)]  # torch in process: a generator a batch
    with mine_loader:
        got = list(mine_loader)
    assert all(type(b).__name__ == "generator" for b in got)  # what torch returns
    mine = [list(b) for b in got]
    def plain(x):
        return x.tolist() if isinstance(x, torch.Tensor) else x
    assert [[plain(x) for x in b] for b in mine] == [[plain(x) for x in b] for b in torchs]
    assert sum(len(b) for b in mine) == (8 if isinstance(dataset, Squares) else 7)
