"""The dispatcher driven by scripted fake lanes: each task completes when the test says so
(events, not sleeps), so every rule of hybridload.execution._dispatch is checked in isolation."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from hybridload.execution._admission import ShareAdmission
from hybridload.execution._pass_config import PassConfig
from hybridload.execution._retry import StragglerRule
from hybridload.errors import BatchTimeoutError, NoLaneError, SampleError, WorkerLost
from hybridload.lanes._base import BatchTask, Lane, LaneKind, Reroute
from hybridload.execution._retry import RetryRules
from hybridload.execution._stats import LoaderStats
from hybridload.execution._stream import BatchStream

WAIT_S = 10.0


class ScriptedLane:
    """A lane whose tasks finish when the test calls ``finish`` (or at once with ``auto``)."""

    def __init__(self, name: str, slots: int = 2, kind: LaneKind = LaneKind.CPU_LOCAL, auto=None):
        self.name, self.slots, self.parallelism, self.kind = name, slots, slots, kind
        self.auto = auto  # None, or task -> result|exception, answered on a thread at once
        self.submitted: list[BatchTask] = []
        self._pending: dict[int, list] = {}
        self._cond = threading.Condition()

    def describe(self) -> str:
        return f"scripted lane {self.name}"

    def run_batch(self, task):
        return ("result", task.seq, self.name)

    def submit(self, task, done) -> None:
        with self._cond:
            self.submitted.append(task)
            self._pending.setdefault(task.seq, []).append((task, done))
            self._cond.notify_all()
        if self.auto is not None:
            threading.Thread(target=lambda: self.finish(task.seq, self.auto(task))).start()

    def finish(self, seq: int, result=None) -> None:
        with self._cond:
            task, done = self._pending[seq].pop(0)
        done(task, ("result", seq, self.name) if result is None else result)

    def wait_submitted(self, n: int) -> list[int]:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.submitted) >= n, WAIT_S):
                raise TimeoutError(f"lane {self.name}: {len(self.submitted)} tasks submitted, waited for {n}")
            return [t.seq for t in self.submitted]

    def close(self) -> None:
        pass


def ok(task):
    return ("result", task.seq, "auto")


def batches(n):
    """The pass's tasks, as the loader makes them: one sample each."""
    return [BatchTask(i, 0, np.array([i]), size=1) for i in range(n)]


def drain(stream, n):
    return [next(stream) for _ in range(n)]


def test_scripted_lane_satisfies_the_lane_contract():
    assert isinstance(ScriptedLane("a"), Lane)


def test_out_of_order_completion_is_delivered_in_sequence_order():
    lane = ScriptedLane("a", slots=4)
    with BatchStream([lane], batches(4), PassConfig(window=4, batch_timeout_s=WAIT_S)) as s:
        lane.wait_submitted(4)
        for seq in (2, 0, 3, 1):
            lane.finish(seq)
        assert [r[1] for r in drain(s, 4)] == [0, 1, 2, 3]


def test_a_lane_failing_twice_in_a_row_is_broken_and_the_other_lane_carries_on():
    bad = ScriptedLane("bad", slots=1, auto=lambda t: RuntimeError("device lost"))
    good = ScriptedLane("good", slots=1, auto=ok)
    stats = LoaderStats()
    with BatchStream(
        [bad, good],
        batches(6),
        PassConfig(window=2, batch_timeout_s=WAIT_S, rules=RetryRules(max_retries=3, break_after=2)),
        hooks=stats,
    ) as s:
        assert [r[1] for r in drain(s, 6)] == list(range(6))
    assert len(bad.submitted) == 2  # broken after two failures in a row: no third task
    assert stats.as_dict()["lanes"]["good"]["images"] == 6


def test_worker_lost_is_retried_on_the_same_lane_without_breaking_it():
    calls = {"n": 0}

    def lose_first_three(task):
        calls["n"] += 1
        return WorkerLost("actor died") if calls["n"] <= 3 else ok(task)

    lane = ScriptedLane("ray", slots=1, kind=LaneKind.CPU_ACTORS, auto=lose_first_three)
    stats = LoaderStats()
    with BatchStream(
        [lane],
        batches(3),
        PassConfig(window=1, batch_timeout_s=WAIT_S, rules=RetryRules(max_retries=2, break_after=1)),
        hooks=stats,
    ) as s:  # 2 + 1 lane: 3 losses fit
        assert [r[1] for r in drain(s, 3)] == [0, 1, 2]
    assert stats.as_dict()["retries"] == 3


def test_reroute_goes_to_another_lane_and_does_not_count_against_its_lane():
    gpu = ScriptedLane("gpu", slots=1, kind=LaneKind.GPU, auto=lambda t: Reroute("not a JPEG") if t.seq % 2 else ok(t))
    cpu = ScriptedLane("cpu", slots=1, auto=lambda t: ("result", t.seq, "cpu"))
    with BatchStream(
        [gpu, cpu],
        batches(8),
        PassConfig(window=1, batch_timeout_s=WAIT_S, rules=RetryRules(break_after=1)),
        fallback=[cpu],
    ) as s:
        out = drain(s, 8)
    assert [r[1] for r in out] == list(range(8))
    assert {r[1] for r in out if r[2] == "cpu"} == {1, 3, 5, 7}
    assert [t.seq for t in gpu.submitted] == list(range(8))  # never broken by reroutes


def test_a_reroute_no_lane_takes_reaches_the_caller_only_as_the_cause_of_a_no_lane_error():
    gpu = ScriptedLane("gpu", slots=1, kind=LaneKind.GPU, auto=lambda t: Reroute("sample 0 (a.png) is not a JPEG"))
    with BatchStream(
        [gpu],
        batches(1),
        PassConfig(window=1, batch_timeout_s=WAIT_S, rules=RetryRules(max_retries=1, break_after=1)),
    ) as s:
        with pytest.raises(NoLaneError, match="batch 0 cannot run") as got:
            next(s)
    assert isinstance(got.value.__cause__, Reroute) and "not a JPEG" in str(got.value.__cause__)


def test_sample_error_is_delivered_in_order_and_not_retried():
    lane = ScriptedLane(
        "a", slots=2, auto=lambda t: SampleError(int(t.seq), "x.jpg", "decode", "bad") if t.seq == 1 else ok(t)
    )
    with BatchStream([lane], batches(3), PassConfig(window=2, batch_timeout_s=WAIT_S)) as s:
        assert next(s)[1] == 0
        with pytest.raises(SampleError, match="sample 1"):
            next(s)
    assert [t.seq for t in lane.submitted].count(1) == 1


def test_a_straggler_is_reissued_and_its_late_duplicate_dropped():
    lane = ScriptedLane("a", slots=2)
    stats = LoaderStats()
    with BatchStream(
        [lane],
        batches(3),
        PassConfig(
            window=3, batch_timeout_s=WAIT_S, stragglers=StragglerRule(straggler_factor=1.0, straggler_min_s=0.2)
        ),
        hooks=stats,
    ) as s:
        assert lane.wait_submitted(2) == [0, 1]
        lane.finish(0)  # teaches the lane its typical task time
        assert next(s)[1] == 0
        assert lane.wait_submitted(3)[2] == 2
        lane.finish(2)
        assert lane.wait_submitted(4)[3] == 1  # seq 1 overdue: issued once more
        lane.finish(1, ("result", 1, "first copy back"))
        assert next(s) == ("result", 1, "first copy back")
        lane.finish(1, ("result", 1, "late copy"))
        assert next(s)[1] == 2
        deadline = time.monotonic() + WAIT_S
        while stats.as_dict()["duplicates_dropped"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    d = stats.as_dict()
    assert d["reissued"] == 1 and d["duplicates_dropped"] == 1
    assert [t.seq for t in lane.submitted].count(1) == 2  # re-issued once only


@pytest.mark.parametrize("cap", [0.0, 0.3, 1.0])
def test_a_capped_lane_takes_at_most_its_share(cap):
    gpu = ScriptedLane("gpu", slots=2, kind=LaneKind.GPU, auto=ok)
    cpu = ScriptedLane("cpu", slots=2, auto=ok)
    n = 40
    with BatchStream(
        [gpu, cpu],
        batches(n),
        PassConfig(window=4, batch_timeout_s=WAIT_S),
        admission=ShareAdmission({LaneKind.GPU: cap}),
    ) as s:
        assert [r[1] for r in drain(s, n)] == list(range(n))
    assert len(gpu.submitted) <= cap * n + 1
    if cap == 0:
        assert not gpu.submitted
    if cap == 1.0:
        assert gpu.submitted  # uncapped in effect: it takes work whenever it has a free slot


def test_a_retry_is_not_asked_to_the_admission_so_a_capped_lane_may_take_it():
    """The cap admits new batches only: a batch handed on after its lane failed was admitted
    already, and a GPU lane capped at 0 takes it when the failed lane is excluded for it."""
    gpu = ScriptedLane("gpu", slots=1, kind=LaneKind.GPU, auto=ok)
    cpu = ScriptedLane("cpu", slots=1, auto=lambda t: RuntimeError("lost") if t.seq == 1 else ok(t))
    with BatchStream(
        [gpu, cpu],
        batches(4),
        PassConfig(window=1, batch_timeout_s=WAIT_S),
        admission=ShareAdmission({LaneKind.GPU: 0.0}),
    ) as s:
        assert [r[1] for r in drain(s, 4)] == [0, 1, 2, 3]
    assert [t.seq for t in gpu.submitted] == [1]  # the retry of batch 1 only, never a new batch


def test_the_window_bounds_the_tasks_started_ahead_of_the_consumer():
    lane = ScriptedLane("a", slots=10, auto=ok)
    with BatchStream([lane], batches(20), PassConfig(window=3, batch_timeout_s=WAIT_S)) as s:
        assert lane.wait_submitted(3) == [0, 1, 2]
        time.sleep(0.2)  # the dispatcher ticks meanwhile; nothing beyond the window may start
        assert len(lane.submitted) == 3
        next(s)
        assert lane.wait_submitted(4) == [0, 1, 2, 3]


def test_stop_mid_flight_ends_the_dispatcher_and_ignores_late_results():
    lane = ScriptedLane("a", slots=2)
    s = BatchStream([lane], batches(5), PassConfig(window=2, batch_timeout_s=WAIT_S))
    lane.wait_submitted(2)
    dispatch_threads = [t for t in threading.enumerate() if t.name == "hybridload-dispatch"]
    s.close()
    lane.finish(0)  # arrives after the stop: ignored, no error
    assert not any(t.is_alive() for t in dispatch_threads if t is not threading.current_thread())
    with pytest.raises(RuntimeError, match=r"next\(\) after close\(\)"):  # not a silent end
        next(s)


def test_a_batch_never_finished_ends_in_a_timeout_naming_the_lane_holding_it():
    lane = ScriptedLane("held", slots=1)
    with BatchStream([lane], batches(2), PassConfig(window=1, batch_timeout_s=0.3)) as s:
        lane.wait_submitted(1)
        with pytest.raises(BatchTimeoutError, match=r"batch 0 did not arrive within 0.3 s \(held by lane 'held'\)"):
            next(s)


def test_every_lane_broken_delivers_an_error_naming_the_batch_not_a_hang():
    lane = ScriptedLane("only", slots=1, auto=lambda t: RuntimeError("boom"))
    with BatchStream(
        [lane], batches(3), PassConfig(window=1, batch_timeout_s=WAIT_S, rules=RetryRules(max_retries=5, break_after=2))
    ) as s:
        with pytest.raises(RuntimeError, match="boom|no lane left"):
            next(s)


class _DeviceImages:
    """Stands in for a CUDA tensor (none exists on a CPU box): what the merger's accounting reads."""

    is_cuda = True
    nbytes = 1000


class _DeviceResult:
    def __init__(self, seq):
        self.seq, self.images = seq, _DeviceImages()


def test_gpu_bytes_buffered_in_the_merger_count_against_the_device_budget():
    gpu = ScriptedLane("gpu", slots=8, kind=LaneKind.GPU, auto=lambda t: _DeviceResult(t.seq))
    cpu = ScriptedLane("cpu", slots=8, auto=ok)
    with BatchStream(
        [gpu, cpu], batches(30), PassConfig(window=20, batch_timeout_s=WAIT_S, gpu_memory_budget_mb=3000 / 2**20)
    ) as s:
        cpu.wait_submitted(1)
        deadline = time.monotonic() + WAIT_S
        while len(gpu.submitted) + len(cpu.submitted) < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # the consumer reads nothing: the GPU lane must stop at the budget
        assert len(gpu.submitted) <= 3
        results = drain(s, 30)
    assert [getattr(r, "seq", None) if not isinstance(r, tuple) else r[1] for r in results] == list(range(30))


def test_the_dispatcher_counts_the_size_each_task_says_not_its_indices():
    lane = ScriptedLane("a", slots=2, auto=ok)
    tasks = [
        BatchTask(0, 0, np.arange(4), size=4),
        BatchTask(1, 0, 7, size=1),  # batch_size=None: one index, one sample
        BatchTask(2, 0, np.arange(3), size=5),
    ]  # what the task says wins
    stats = LoaderStats()
    with BatchStream([lane], tasks, PassConfig(window=2, batch_timeout_s=WAIT_S), hooks=stats) as s:
        assert [r[1] for r in drain(s, 3)] == [0, 1, 2]
    assert stats.as_dict()["lanes"]["a"]["images"] == 10
    assert [t.size for t in lane.submitted] == [4, 1, 5]  # the tasks handed to the lane are the caller's


def test_tasks_out_of_place_are_refused():
    with pytest.raises(ValueError, match=r"tasks\[1\] has seq 2"):
        BatchStream([ScriptedLane("a")], [BatchTask(0, 0, [0]), BatchTask(2, 0, [1])])


class RecordingAdmission(ShareAdmission):
    """ShareAdmission that records the thread of each change of its caps."""

    def __init__(self, caps, steer):
        super().__init__(caps, steer=steer)
        self.writers: list[int] = []

    def batch_done(self, *args):
        before = self.snapshot()
        super().batch_done(*args)
        if self.snapshot() != before:
            self.writers.append(threading.get_ident())


class HalvingHook:
    """A caps hook: every 4 finished batches, halves the GPU cap; records where it is called."""

    def __init__(self):
        self.threads: set[str] = set()
        self.idents: set[int] = set()
        self.calls: list[tuple] = []

    def batch_done(self, seq, lane, images, seconds, caps):
        self.threads.add(threading.current_thread().name)
        self.idents.add(threading.get_ident())
        self.calls.append((seq, lane, images))
        return {LaneKind.GPU: caps[LaneKind.GPU] / 2} if len(self.calls) % 4 == 0 else None


def test_caps_are_written_by_the_dispatcher_thread_only_through_the_admissions_hook():
    gpu = ScriptedLane("gpu", slots=2, kind=LaneKind.GPU, auto=ok)
    cpu = ScriptedLane("cpu", slots=2, auto=ok)
    hook = HalvingHook()
    caps = RecordingAdmission({LaneKind.GPU: 0.8}, hook)
    with BatchStream([gpu, cpu], batches(16), PassConfig(window=4, batch_timeout_s=WAIT_S), admission=caps) as s:
        assert [r[1] for r in drain(s, 16)] == list(range(16))
        deadline = time.monotonic() + WAIT_S
        while len(hook.calls) < 16 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert sorted(c[0] for c in hook.calls) == list(range(16))  # once per finished batch
    assert all(images == 1 for _, _, images in hook.calls)
    assert hook.threads == {"hybridload-dispatch"} and len(hook.idents) == 1
    assert len(caps.writers) == 4 and set(caps.writers) == hook.idents  # its answers, written on its thread
    assert threading.get_ident() not in caps.writers
    assert caps.snapshot() == {LaneKind.GPU: 0.8 / 16}


def test_a_pass_hands_out_its_first_batches_at_once_not_at_the_first_tick():
    """A pass's first fill does not wait for the dispatcher's first ``tick_s`` (50 ms by
    default): that wait would leave the lanes idle for 52 ms of a 270 ms pass of 8 batches on
    one lane thread. With a tick far beyond the wait, the first tasks are handed out at once."""
    lane = ScriptedLane("a", slots=2)
    with BatchStream([lane], batches(4), PassConfig(window=4, batch_timeout_s=WAIT_S, tick_s=60.0)) as s:
        t0 = time.perf_counter()
        assert lane.wait_submitted(2) == [0, 1]
        assert time.perf_counter() - t0 < WAIT_S / 2
        lane.finish(0)
        assert next(s)[1] == 0
