"""The drop-in's passes that run in this process (an ``IterableDataset`` with
``num_workers=0``; a pass that finds no CPU for its actors) leave the user's loader as built:
torch's single-process iterator sees ``num_workers=0`` and ``timeout=0`` through a view of
the loader, never by changing the loader's own attributes. No Ray: these passes start none."""

import pytest
import torch

import hybridload
from hybridload._dataloader.inprocess import OVERSUBSCRIBED, in_process_pass


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


class PerWorker(torch.utils.data.IterableDataset):
    """Each worker gives (its id, a number from the global generator) three times; ``worker_init_fn``
    marks the worker's own copy."""

    def __init__(self):
        self.marked = None

    def init(self, worker_id):
        self.marked = worker_id

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        assert self.marked == info.id  # the copy worker_init_fn set up is the one iterated
        return iter([(info.id, info.seed, float(torch.rand(()))) for _ in range(3)])


def test_an_iterable_pass_hosted_here_gives_each_workers_stream_in_turn_and_leaves_this_process_as_it_was():
    from hybridload._dataloader.hosted import HostedPass

    ds = PerWorker()
    loader = hybridload.DataLoader(ds, batch_size=None, distribute_mode=True, num_workers=3, worker_init_fn=ds.init)
    torch.manual_seed(1)
    rng, threads = torch.get_rng_state(), torch.get_num_threads()
    got = list(HostedPass(loader, 100, length=None, reported=None))
    assert [(w, seed) for w, seed, _ in got] == [(w, 100 + w) for _ in range(3) for w in range(3)]  # torch's turn
    assert len({r for *_, r in got}) == 9  # each worker seeded apart (base_seed + id), as torch's
    assert torch.equal(torch.get_rng_state(), rng) and torch.get_num_threads() == threads
    assert torch.utils.data.get_worker_info() is None and ds.marked is None  # the user's dataset untouched
