"""The drop-in's passes that run in this process (an ``IterableDataset`` with
``num_workers=0``; a pass that finds no CPU for its actors) leave the user's loader as built:
torch's single-process iterator sees ``num_workers=0`` and ``timeout=0`` through a view of
the loader, never by changing the loader's own attributes. No Ray: these passes start none."""

import pytest
import torch

import hybridload
from hybridload.dataloader.inprocess import OVERSUBSCRIBED, in_process_pass


class Watching(torch.utils.data.IterableDataset):
    """Records the loader's ``num_workers`` and ``timeout`` as its iterator starts (what a
    callback or another thread reading the loader would see during the pass)."""

    def __init__(self):
        self.loader, self.seen = None, []

    def __iter__(self):  # not a generator: it runs as torch's fetcher calls iter(dataset)
        self.seen.append((self.loader.num_workers, self.loader.timeout))
        return (torch.tensor([i]) for i in range(5))


def test_an_in_process_pass_never_changes_the_loaders_timeout_even_while_it_starts():
    ds = Watching()
    loader = hybridload.DataLoader(ds, batch_size=2, distribute_mode=True, num_workers=0, timeout=7)
    ds.loader = loader
    got = [b.tolist() for b in loader]
    assert got == [[[0], [1]], [[2], [3]], [[4]]]
    assert ds.seen == [(0, 7)]
    assert (loader.num_workers, loader.timeout) == (0, 7)


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return i * i


class WatchingBatchSampler(torch.utils.data.Sampler):
    """Batches of 4 indices; records the loader's settings as the pass draws its order."""

    def __init__(self, n):
        self.n, self.loader, self.seen = n, None, []

    def __len__(self):
        return (self.n + 3) // 4

    def __iter__(self):  # not a generator: it runs as torch's iterator calls iter(batch_sampler)
        self.seen.append((self.loader.num_workers, self.loader.timeout))
        return iter([list(range(k, min(k + 4, self.n))) for k in range(0, self.n, 4)])


def test_a_pass_run_in_process_instead_of_on_actors_leaves_num_workers_as_the_user_gave_it():
    sampler = WatchingBatchSampler(6)
    loader = hybridload.DataLoader(Squares(), batch_sampler=sampler, distribute_mode=True, num_workers=2, timeout=5)
    sampler.loader = loader
    with pytest.warns(UserWarning, match="runs in this process"):
        it = in_process_pass(loader, why=OVERSUBSCRIBED)
    assert [b.tolist() for b in it] == [[0, 1, 4, 9], [16, 25]]
    assert sampler.seen == [(2, 5)]
    assert (loader.num_workers, loader.timeout) == (2, 5)
