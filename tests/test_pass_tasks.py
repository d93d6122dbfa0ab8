"""Tasks made when the dispatcher reaches them (hybridload.execution._tasks) and the straggler
deadline heap (hybridload.execution._stragglers): nothing per epoch is listed, a sampler
whose len() disagrees with what it yields is named, and a wake looks only at copies due."""

import time

import numpy as np
import pytest

from hybridload.execution._retry import StragglerRule
from hybridload.execution._stragglers import StragglerWatch, Watched
from hybridload.execution._pass_config import PassConfig
from hybridload.execution._stream import BatchStream
from hybridload.execution._tasks import LazyTasks, StreamedTasks
from hybridload.lanes._base import BatchTask

from test_scheduler import ScriptedLane, ok


def make(k, b):
    return BatchTask(k, 0, np.asarray(b), size=len(b))


class CountingBatches:
    """Batches made on demand, counting how many were made."""

    def __init__(self, n):
        self.n, self.made = n, 0

    def __len__(self):
        return self.n

    def __getitem__(self, k):
        self.made += 1
        return [k]

    def __iter__(self):
        for k in range(self.n):
            self.made += 1
            yield [k]


def test_a_pass_over_lazy_tasks_makes_only_what_the_window_reached():
    batches = CountingBatches(10**9)  # a billion batches: a listed epoch could not be made
    lane = ScriptedLane("a", slots=2, auto=ok)
    with BatchStream([lane], LazyTasks(batches, make), PassConfig(window=4, batch_timeout_s=10)) as stream:
        got = [next(stream) for _ in range(20)]
    assert [g[1] for g in got] == list(range(20))
    assert batches.made < 40


def test_streamed_tasks_pull_the_sampler_in_order_and_name_a_wrong_len():
    source = CountingBatches(50)
    tasks = StreamedTasks(iter(source), 50, make, what="the sampler S")
    assert source.made == 1  # the first is pulled where the tasks are made
    lane = ScriptedLane("a", slots=2, auto=ok)
    with BatchStream([lane], tasks, PassConfig(window=4, batch_timeout_s=10)) as stream:
        assert [next(stream)[1] for _ in range(5)] == list(range(5))
        assert source.made <= 5 + 4 + 1
        assert [r[1] for r in stream] == list(range(5, 50))
    short = StreamedTasks(iter(CountingBatches(3)), 5, make, what="the sampler S")
    with BatchStream([ScriptedLane("a", slots=2, auto=ok)], short, PassConfig(window=4, batch_timeout_s=10)) as stream:
        assert [next(stream)[1] for _ in range(3)] == [0, 1, 2]
        with pytest.raises(RuntimeError, match="the sampler S stopped after 3 batches but its len\\(\\) said 5"):
            next(stream)
    long = StreamedTasks(iter(CountingBatches(7)), 5, make, what="the sampler S")
    with BatchStream([ScriptedLane("a", slots=2, auto=ok)], long, PassConfig(window=4, batch_timeout_s=10)) as stream:
        with pytest.raises(RuntimeError, match="yields more batches than its len\\(\\) \\(5\\)"):
            list(stream)


class Book:
    def __init__(self, typical_s):
        self.typical_s = typical_s


def test_a_wake_looks_only_at_the_copies_that_are_due():
    rule = StragglerRule(straggler_factor=4.0, straggler_min_s=2.0)
    watch = StragglerWatch(rule)
    book, now = Book(0.01), 100.0
    running = {}
    for seq in range(10_000):
        t0 = now - 1.0 if seq < 9_990 else now - 3.0  # the last 10 started 3 s ago: past min_s
        running[seq] = [(book, t0)]
        watch.started(Watched(seq, book, t0, None))
    looked = []

    def settled(seq):
        looked.append(seq)
        return False

    overdue = [c.seq for c in watch.overdue(now, running, set(), settled)]
    assert overdue == list(range(9_990, 10_000))
    assert sorted(looked) == overdue  # the 9,990 not yet due were not looked at
    assert len(watch) == 9_990


def test_a_copy_whose_lane_has_no_typical_time_yet_is_looked_at_again_later():
    watch = StragglerWatch(StragglerRule(straggler_factor=4.0, straggler_min_s=2.0))
    book = Book(None)
    watch.started(Watched(0, book, 0.0, None))
    running = {0: [(book, 0.0)]}
    assert list(watch.overdue(2.5, running, set(), lambda s: False)) == []
    book.typical_s = 1.0  # the deadline is now 0 + 4 x 1.0 = 4 s
    assert list(watch.overdue(4.4, running, set(), lambda s: False)) == []  # next look at 4.5 (2.5 + min_s)
    assert [c.seq for c in watch.overdue(4.5, running, set(), lambda s: False)] == [0]
    running[0] = []  # an ended copy is dropped when it comes up
    watch.started(Watched(0, book, 10.0, None))
    assert list(watch.overdue(time.perf_counter() + 1e6, running, set(), lambda s: False)) == []
    assert len(watch) == 0
    off = StragglerWatch(StragglerRule(straggler_factor=None))
    off.started(Watched(0, book, 0.0, None))
    assert len(off) == 0


class CountingSampler:
    """A batch sampler that counts the batches pulled from it (so far)."""

    def __init__(self, n, bs):
        self.n, self.bs, self.pulled = n, bs, 0

    def __len__(self):
        return self.n // self.bs

    def __iter__(self):
        for k in range(len(self)):
            self.pulled += 1
            yield list(range(k * self.bs, (k + 1) * self.bs))


def test_the_drop_in_on_ray_pulls_its_batch_sampler_as_it_goes(ray_cluster):
    """distribute_mode=True with a long epoch: the first batches arrive while the sampler has
    yielded only what the window reached, not the epoch's list."""
    import torch

    import hybridload

    class Ints(torch.utils.data.Dataset):
        def __len__(self):
            return 10**6

        def __getitem__(self, i):
            return i

    sampler = CountingSampler(10**6, 4)  # 250,000 batches
    with hybridload.DataLoader(Ints(), batch_sampler=sampler, distribute_mode=True, num_actors=1, window=3) as loader:
        it = iter(loader)
        first = [next(it).tolist() for _ in range(3)]
        assert first == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
        assert len(it) == 250_000 and sampler.pulled <= 3 + 3 + 1


def endless(pulled: list):
    """An iterator of batches without end (an infinite sampler), counting what was pulled."""
    k = 0
    while True:
        pulled.append(k)
        yield [k]
        k += 1


def test_open_ended_tasks_pull_only_what_the_window_reached_and_end_where_the_iterator_does():
    pulled: list = []
    tasks = StreamedTasks(endless(pulled), None, make, what="the sampler S")
    with BatchStream([ScriptedLane("a", slots=2, auto=ok)], tasks, PassConfig(window=4, batch_timeout_s=10)) as stream:
        assert [next(stream)[1] for _ in range(50)] == list(range(50))
        assert len(pulled) <= 50 + 4 + 1  # the window ahead, never the (endless) epoch
    for n in (0, 1, 7):  # a finite iterator without len(): the pass ends where it does, every batch once
        tasks = StreamedTasks(iter([[k] for k in range(n)]), None, make, what="the sampler S")
        with BatchStream(
            [ScriptedLane("a", slots=2, auto=ok)], tasks, PassConfig(window=3, batch_timeout_s=10)
        ) as stream:
            assert [r[1] for r in stream] == list(range(n))
            assert len(tasks) == n
            with pytest.raises(StopIteration):
                next(stream)
