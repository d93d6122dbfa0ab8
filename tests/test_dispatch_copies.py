"""The dispatcher when a batch runs as two copies (a straggler issued again) and one fails.

A failure that is the batch's own (a `SampleError`, a `UserCodeError`: deterministic, the
other copy raises the same; a `WorkerLost` with ``batch_at_fault``: the batch killed its
workers, the other copy kills one more) settles the batch at once: it is delivered in order,
the other copies are cancelled at their lanes and whatever they report later is dropped. A
plain `WorkerLost` (a worker died, the batch is not blamed) or a `StorageError` (an outage,
not the sample) is dropped while the other copy runs, which carries the batch.

The lane is a real `Lane` subclass (its ``submit`` template: once-only reports, the count in
flight) whose copies end when the test says so: events, not sleeps."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from hybridload.errors import SampleError, StorageError, UserCodeError, WorkerLost
from hybridload.execution._pass_config import PassConfig
from hybridload.execution._retry import StragglerRule
from hybridload.execution._stats import LoaderStats
from hybridload.execution._stream import BatchStream
from hybridload.lanes._base import BatchTask, Lane, LaneKind

WAIT_S = 10.0


class HeldLane(Lane):
    """Each copy waits for ``finish``. ``cancel`` stops the task's copies and reports them
    cancelled, as the in-process lane does; with ``stops=False`` it does nothing and the copies
    run to their end, as a Ray actor that already started a batch does."""

    kind = LaneKind.CPU_ACTORS

    def __init__(self, name: str, slots: int, stops: bool = True):
        super().__init__()
        self.name, self.slots, self.parallelism, self.stops = name, slots, slots, stops
        self.started: list[int] = []  # seqs, in the order their copies started
        self.cancelled: list[int] = []
        self._copies: list[tuple[BatchTask, object]] = []
        self._cond = threading.Condition()

    def describe(self) -> str:
        return f"held lane {self.name}"

    def run_batch(self, task: BatchTask):
        return ("result", task.seq, self.name)

    def _start(self, task: BatchTask, done) -> None:
        with self._cond:
            self.started.append(task.seq)
            self._copies.append((task, done))
            self._cond.notify_all()

    def cancel(self, task: BatchTask) -> None:
        with self._cond:
            self.cancelled.append(task.seq)
            self._cond.notify_all()
            if not self.stops:
                return
            mine = [c for c in self._copies if c[0] is task]
            self._copies = [c for c in self._copies if c[0] is not task]
        for t, done in mine:
            done(t, RuntimeError(f"batch {t.seq} was cancelled on the {self.name} lane"))

    def finish(self, seq: int, result=None) -> None:
        """End the oldest running copy of ``seq`` with ``result`` (a batch by default)."""
        with self._cond:
            task, done = next(c for c in self._copies if c[0].seq == seq)
            self._copies.remove((task, done))
        done(task, ("result", seq, self.name) if result is None else result)

    def wait_for(self, what, about: str) -> None:
        with self._cond:
            if not self._cond.wait_for(what, WAIT_S):
                raise TimeoutError(f"lane {self.name}: waited {WAIT_S} s for {about}")


def batches(n: int) -> list[BatchTask]:
    return [BatchTask(i, 0, np.array([i]), size=1) for i in range(n)]


def two_copies_of_batch_1(lane: HeldLane) -> None:
    """Batch 0 teaches the lane its typical time; batch 2 ends; batch 1 overruns and is issued again."""
    lane.wait_for(lambda: lane.started == [0, 1], "batches 0 and 1 to start")
    lane.finish(0)
    lane.wait_for(lambda: len(lane.started) == 3, "batch 2 to start")
    lane.finish(2)
    lane.wait_for(lambda: lane.started == [0, 1, 2, 1], "batch 1 to be issued again")


def wait_until(what, about: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not what() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert what(), f"waited {WAIT_S} s for {about}"


OWN_FAILURES = {
    "blamed_worker_lost": lambda: WorkerLost("batch 1 killed 2 workers (pids 7, 8)", batch_at_fault=True),
    "user_code_error": lambda: UserCodeError("batch 1 (indices [1])", "ValueError: collate broke"),
    "sample_error": lambda: SampleError(1, "x.jpg", "decode", "bad marker"),
}


@pytest.mark.parametrize("stops", [True, False], ids=["cancel_stops_the_copy", "copy_runs_to_its_end"])
@pytest.mark.parametrize("failure", list(OWN_FAILURES))
def test_a_batchs_own_failure_is_delivered_at_once_and_its_other_copy_cancelled(failure, stops):
    lane, stats = HeldLane("ray", slots=2, stops=stops), LoaderStats()
    config = PassConfig(
        window=3, batch_timeout_s=WAIT_S, stragglers=StragglerRule(straggler_factor=1.0, straggler_min_s=0.2)
    )
    with BatchStream([lane], batches(3), config, hooks=stats) as stream:
        two_copies_of_batch_1(lane)
        error = OWN_FAILURES[failure]()
        lane.finish(1, error)  # the first copy fails; the second still runs
        # cancelled while the pass goes on (the consumer has not reached batch 1), not at its end
        lane.wait_for(lambda: lane.cancelled == [1], "the other copy of batch 1 to be cancelled")
        if not stops:
            lane.finish(1)  # the copy that could not be stopped ends with a batch: dropped, not delivered
            wait_until(lambda: stats.as_dict()["duplicates_dropped"] == 1, "the late copy to be dropped")
        wait_until(lambda: lane.in_flight == 0, "every copy's report")
        assert next(stream)[1] == 0
        t0 = time.monotonic()
        with pytest.raises(type(error)) as got:  # in order, where batch 1 stands
            next(stream)
        assert got.value is error and time.monotonic() - t0 < WAIT_S / 2  # at once, not at the timeout
    assert lane.started == [0, 1, 2, 1] and lane.cancelled == [1]  # not handed on, cancelled once
    assert stats.as_dict()["retries"] == 0 and stats.as_dict()["duplicates_dropped"] == (0 if stops else 1)


NOT_THE_BATCHS = {
    "worker_lost": lambda: WorkerLost("actor 0 died while it held batch 1"),  # a worker's death, not the batch's doing
    "storage_outage": lambda: StorageError(1, "s3://b/x.jpg", "connection refused", 3, 1.5),  # may be over by now
}


@pytest.mark.parametrize("failure", list(NOT_THE_BATCHS))
def test_a_failure_not_the_batchs_own_is_dropped_while_its_other_copy_carries_it(failure):
    lane, stats = HeldLane("ray", slots=2), LoaderStats()
    config = PassConfig(
        window=3, batch_timeout_s=WAIT_S, stragglers=StragglerRule(straggler_factor=1.0, straggler_min_s=0.2)
    )
    with BatchStream([lane], batches(3), config, hooks=stats) as stream:
        two_copies_of_batch_1(lane)
        lane.finish(1, NOT_THE_BATCHS[failure]())
        lane.finish(1, ("result", 1, "second copy"))
        assert [next(stream) for _ in range(3)] == [
            ("result", 0, "ray"),
            ("result", 1, "second copy"),
            ("result", 2, "ray"),
        ]
        with pytest.raises(StopIteration):
            next(stream)
    assert lane.cancelled == [] and lane.started == [0, 1, 2, 1]
    assert stats.as_dict()["retries"] == 0


class Sample2FailsOnItsSecondRead:
    """Sample 2's first read (the copy that straggles) waits until ``release``; its second read
    (the copy issued again) raises: a sample that is bad for both copies, found by the second first."""

    def __init__(self):
        self.reads = [0] * 6
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __len__(self):
        return 6

    def __getitem__(self, i):
        with self._lock:
            self.reads[i] += 1
            n = self.reads[i]
        if i == 2 and n == 1:
            self.release.wait(WAIT_S)
        if i == 2 and n == 2:
            raise ValueError("sample 2 is unreadable")
        return np.full((40, 40, 3), i, np.uint8), i


def test_on_the_in_process_lane_a_bad_sample_in_a_copy_issued_again_ends_the_batch_while_the_first_copy_blocks():
    from hybridload import recipe, sources
    from hybridload.lanes._local.inprocess import InProcessLane

    ds = Sample2FailsOnItsSecondRead()
    lane = InProcessLane(sources.TorchDataset(ds), recipe.imagenet_eval(32), threads=2)
    tasks = [BatchTask(k, 0, np.array([2 * k, 2 * k + 1]), size=2) for k in range(3)]
    config = PassConfig(
        window=3, batch_timeout_s=WAIT_S, stragglers=StragglerRule(straggler_factor=1.0, straggler_min_s=0.3)
    )
    try:
        with BatchStream([lane], tasks, config) as stream:
            assert next(stream).indices.tolist() == [0, 1]
            t0 = time.monotonic()
            with pytest.raises((SampleError, UserCodeError), match="sample 2") as got:
                next(stream)  # the second copy's error, while the first copy still waits in sample 2
            assert time.monotonic() - t0 < WAIT_S / 2 and not ds.release.is_set(), got.value
            ds.release.set()
            wait_until(lambda: lane.in_flight == 0, "the first copy to end")
        assert ds.reads[2] == 2 and ds.reads[3] == 0, ds.reads  # the first copy stopped before sample 3
    finally:
        ds.release.set()
        lane.close()
