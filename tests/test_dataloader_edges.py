"""The drop-in DataLoader on Ray actors at the edges torch handles: an infinite sampler
(iteration-based training) consumed lazily; a ``collate_fn`` returning a generator. Each case
against torch's own DataLoader on the same arguments, on the shared 3-node loopback cluster."""

import collections
import itertools
import re
import signal

import pytest
import torch
from torch.utils.data import Dataset, Sampler

import hybridload
from support.datasets import third_batch_error


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
    expected = [torch.stack([Squares()[i] for i in first[k : k + bs]]).tolist() for k in range(0, len(first), bs)]
    sampler = TrainingSampler(50)
    with hybridload.DataLoader(
        Squares(), batch_size=bs, sampler=sampler, distribute_mode=True, num_workers=2, window=window, timeout=120
    ) as loader:  # timeout: the deadline of every next()
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


class Unsplit(torch.utils.data.IterableDataset):
    """An IterableDataset that does not split itself by worker (torch's test_iterable_style_dataset):
    each worker that iterates it yields every sample; it records the worker info it ran under."""

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        for i in range(9):
            yield torch.tensor([i, -1 if info is None else info.id])


def test_an_iterable_dataset_with_num_workers_0_runs_once_in_process_as_torch(ray_cluster):
    from support.ray_fixtures import alive_actors

    kw = dict(batch_size=4)
    torchs = [b.tolist() for b in torch.utils.data.DataLoader(Unsplit(), **kw)]
    with hybridload.DataLoader(Unsplit(), distribute_mode=True, num_workers=0, **kw) as loader:
        it = iter(loader)
        mine = [next(it).tolist()]
        assert alive_actors() == []  # no actor: torch's num_workers=0 runs in the main process
        mine += [b.tolist() for b in it]
    assert mine == torchs  # every sample once, get_worker_info() None as in torch's main process


def test_multiprocessing_context_is_accepted_with_one_warning_and_the_actors_run_the_pass(ray_cluster):
    import warnings

    kw = dict(batch_size=3, sampler=list(range(8)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's default: a warning once per place
        loaders = [
            hybridload.DataLoader(Squares(), distribute_mode=True, num_workers=2, multiprocessing_context=ctx, **kw)
            for ctx in ("spawn", "forkserver")
        ]
    said = [w for w in caught if "multiprocessing_context" in str(w.message)]
    assert len(said) == 1 and "ignored" in str(said[0].message) and "Ray actors" in str(said[0].message)
    torchs = [b.tolist() for b in torch.utils.data.DataLoader(Squares(), **kw)]
    for loader in loaders:
        with loader:
            assert loader.multiprocessing_context is None  # torch's attribute: no processes of its own
            assert [b.tolist() for b in loader] == torchs


def test_a_batch_that_crashed_its_worker_raises_worker_lost_at_the_first_crash_naming_worker_and_signal(ray_cluster):
    error, took = third_batch_error(signal.SIGSEGV)
    msg = str(error)
    assert re.search(r"DataLoader worker \(pid \d+\) is killed by signal: Segmentation fault", msg), msg  # torch's
    # blamed at the first crash, as torch's loader fails at its first dead worker: the batch is not run again
    said = re.search(r"batch 2 killed (\d+) workers \(pids ([\d, ]+)\), (\d+) of them by a crash signal", msg)
    assert said and error.batch_at_fault, msg
    assert int(said.group(1)) == 1 and int(said.group(3)) == 1, msg
    assert took < 20, took  # no worker start at all


def lock_for_batch_1(samples):
    """A collate_fn whose batch holding sample 2 is a value Ray cannot send back (a lock)."""
    import threading

    if any(int(s[0]) == 2 for s in samples):
        return threading.Lock()
    return torch.stack(samples)


def raising_collate(samples):
    raise ValueError("collate broke on purpose")


def test_a_failing_collate_fn_reaches_the_loop_with_its_own_class_and_no_colour_codes(ray_cluster):
    kw = dict(batch_size=2, sampler=list(range(6)), distribute_mode=True, num_workers=2, timeout=120)
    with hybridload.DataLoader(Squares(), collate_fn=raising_collate, **kw) as loader:
        with pytest.raises(ValueError, match="collate broke on purpose") as raised:
            next(iter(loader))
    assert "\x1b[" not in str(raised.value)
    with hybridload.DataLoader(Squares(), collate_fn=lock_for_batch_1, **kw) as loader:
        it = iter(loader)
        assert next(it).tolist() == [[0, 0], [1, 1]]
        with pytest.raises(TypeError, match="could not send back what collate_fn returned") as unsent:
            next(it)
        assert next(it).tolist() == [
            [4, 16],
            [5, 25],
        ]  # the user's error is raised once, the pass goes on (torch's rule)
        assert loader.stats()["retries"] == 0  # deterministic: never retried
    assert "cannot pickle" in str(unsent.value) and "\x1b[" not in str(unsent.value)


class Locked(Dataset):
    """A dataset holding what cannot be pickled (a lock; an open file or a handle alike)."""

    def __init__(self):
        import threading

        self.lock = threading.Lock()

    def __len__(self):
        return 10

    def __getitem__(self, i):
        return i


def test_a_random_split_subset_that_cannot_travel_names_the_dataset_the_attribute_and_what_to_do(ray_cluster):
    subset, _ = torch.utils.data.random_split(Locked(), [6, 4], generator=torch.Generator().manual_seed(0))
    with hybridload.DataLoader(subset, batch_size=2, distribute_mode=True, num_workers=1) as loader:
        with pytest.raises(TypeError) as got:
            next(iter(loader))
    msg = str(got.value)
    assert "the dataset (Subset of Locked)" in msg and "dataset.dataset.lock (a lock)" in msg
    assert "worker_init_fn" in msg and "\x1b[" not in msg


class NamedTupleDataset(Dataset):
    """torch's test_dataloader_with_namedtuple: namedtuples made in the class body (their
    qualified name is "Batch", which pickle cannot find in this module)."""

    Batch = collections.namedtuple("Batch", ["data", "label", "random_tensor"])
    Data = collections.namedtuple("Data", ["positive", "negative"])

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return self.Batch(data=self.Data(positive=i, negative=-i), label=str(i), random_tensor=torch.randn(3))


def test_namedtuples_of_the_users_module_come_back_as_the_same_classes(ray_cluster):
    with hybridload.DataLoader(
        NamedTupleDataset(), batch_size=2, distribute_mode=True, num_workers=1, timeout=120
    ) as loader:
        batches = list(loader)
    torchs = list(torch.utils.data.DataLoader(NamedTupleDataset(), batch_size=2))
    assert len(batches) == len(torchs) == 2
    for batch, theirs in zip(batches, torchs):
        assert type(batch) is NamedTupleDataset.Batch and type(batch.data) is NamedTupleDataset.Data  # as torch's
        assert batch.data.positive.tolist() == theirs.data.positive.tolist() and batch.label == theirs.label


class Shared(Dataset):
    """torch's SynchronizedDataset: a count its worker processes share (a ``multiprocessing.Value``,
    shared by inheritance only) and a barrier its two workers meet at before each sample."""

    def __init__(self):
        import multiprocessing

        self.count = multiprocessing.Value("i", 0, lock=True)
        self.barrier = multiprocessing.Barrier(2)

    def __len__(self):
        return 4

    def __getitem__(self, i):
        self.barrier.wait(timeout=5)  # one process alone breaks it within 5 s, never hangs
        with self.count.get_lock():
            self.count.value += 1
        return i


class SharedStream(torch.utils.data.IterableDataset):
    """The same as an IterableDataset."""

    def __init__(self):
        self.inner = Shared()

    def __iter__(self):
        return (self.inner[i] for i in range(len(self.inner)))


@pytest.mark.parametrize("dataset", [Shared, SharedStream], ids=["map-style", "iterable"])
def test_a_dataset_holding_a_multiprocessing_value_names_the_attribute_that_cannot_travel(ray_cluster, dataset):
    with hybridload.DataLoader(dataset(), batch_size=2, distribute_mode=True, num_workers=2, timeout=60) as loader:
        with pytest.raises(TypeError) as got:
            next(iter(loader))
    msg = str(got.value)
    assert re.search(r"dataset(\.inner)?\.count \(a Synchronized\) cannot be pickled", msg), msg
    assert "only be shared between processes through inheritance" in msg and "distribute_mode=False" in msg


@pytest.mark.parametrize("dataset", [Shared, SharedStream], ids=["map-style", "iterable"])
def test_a_dataset_its_workers_synchronize_is_refused_by_name_not_run_in_process_when_no_cpu_is_free(
    ray_cluster, dataset
):
    """Another loader's persistent actors hold every CPU: the pass would run in this process, where
    the two workers the barrier waits for are one (torch's persistent-workers tests hung there)."""
    import warnings

    import ray

    cpus = int(ray.cluster_resources()["CPU"])
    kw = dict(batch_size=2, distribute_mode=True, timeout=60)
    with hybridload.DataLoader(Squares(), num_workers=cpus, persistent_workers=True, **kw) as holder:
        list(holder)  # its actors stay: no CPU is free
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fewer-slots warning
            with hybridload.DataLoader(dataset(), num_workers=2, **kw) as loader:
                with pytest.raises(TypeError, match=r"count \(a Synchronized\) cannot be pickled"):
                    next(iter(loader))


def test_an_iterable_datasets_actors_that_start_late_raise_a_timeout_in_the_drop_ins_words(ray_cluster):
    """Asking each actor of an IterableDataset pass for its worker ids waits for its start: past
    the start timeout a TimeoutError names the knob, never Ray's raw GetTimeoutError."""
    import ray

    from hybridload._dataloader.pools import hosted_ids

    @ray.remote(num_cpus=0)
    class Slow:
        def ids(self):
            import time

            time.sleep(30)
            return [0]

    actor = Slow.remote()
    try:
        with pytest.raises(TimeoutError, match="HYBRIDLOAD_ACTOR_START_TIMEOUT_S") as got:
            hosted_ids([actor], 1.0)
        assert not isinstance(got.value, ray.exceptions.GetTimeoutError)
    finally:
        ray.kill(actor)
