"""The lane skeletons on their own: the ``Lane`` template (closed check, tasks in flight, one
close), the ``GpuLane`` skeleton with a made-up engine, and the one shutdown routine
(``close_all``) as the loader, the drop-in and ``close_lanes`` use it."""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest
import torch

from hybridload import DataLoader, HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import ShutdownError, close_all, take_all
from hybridload.lanes._base import BatchTask, Lane, LaneKind, PooledLane, Reroute
from hybridload.lanes._build import close_lanes
from hybridload.lanes._gpu.base import GpuLane, batches_within
from hybridload.lanes._gpu.feed import GpuBatchResult
from hybridload.lanes._local.inprocess import InProcessLane

REC = recipe.imagenet_train(32)
WAIT_S = 10.0


class HeldLane(Lane):
    """A lane whose tasks finish when the test says (``finish``); counts its ``_close`` calls."""

    name, kind, slots, parallelism = "held", LaneKind.CPU_LOCAL, 4, 4

    def __init__(self, refuse: Exception | None = None):
        super().__init__()
        self.refuse, self.pending, self.closes = refuse, {}, 0

    def describe(self) -> str:
        return "held lane"

    def run_batch(self, task):
        return task.seq

    def _start(self, task, done):
        if self.refuse is not None:
            raise self.refuse
        self.pending[task.seq] = done

    def finish(self, seq, result="ok"):
        self.pending[seq](BatchTask(seq, 0, np.array([seq])), result)

    def _close(self):
        self.closes += 1


def task(seq: int, n: int = 1) -> BatchTask:
    return BatchTask(seq, 0, np.arange(seq, seq + n))


# ------------------------------------------------------------------ the Lane template
def test_a_class_with_the_contracts_methods_is_a_lane_without_the_base():
    class Duck:
        def describe(self): ...
        def run_batch(self, task): ...
        def submit(self, task, done): ...
        def close(self): ...

    class NoSubmit:
        def describe(self): ...
        def run_batch(self, task): ...
        def close(self): ...

    assert isinstance(Duck(), Lane) and not isinstance(NoSubmit(), Lane)
    assert isinstance(HeldLane(), Lane)


def test_every_hybridload_lane_is_built_on_the_template():
    from hybridload._dataloader import DataLoader as DropIn  # noqa: F401  (its actor pool, below)
    from hybridload.lanes._gpu.dali import DaliLane
    from hybridload.lanes._gpu.torch_lane import TorchGpuLane
    from hybridload.lanes._local.process import ProcessLane
    from hybridload.lanes._ray.actor_pool import ActorPool
    from hybridload.lanes._ray.lane import RayLane

    assert issubclass(InProcessLane, PooledLane) and issubclass(GpuLane, PooledLane)
    assert all(issubclass(c, GpuLane) for c in (DaliLane, TorchGpuLane))
    assert all(issubclass(c, Lane) for c in (ProcessLane, ActorPool, RayLane))
    for cls in (InProcessLane, ProcessLane, ActorPool, DaliLane, TorchGpuLane):
        assert "submit" not in vars(cls) and "close" not in vars(cls), cls  # the template's, not a copy


def test_reroute_is_the_lane_contracts_signal_and_no_public_error():
    """A lane's "not mine" reaches the dispatcher only, so it lives with the contract, not in
    `hybridload.errors` (what users see); it still pickles whole (GPU prep worker processes
    raise it) and is a `HybridLoadError` for an ``except`` around a lane's ``run_batch``."""
    import pickle

    import hybridload.errors

    assert "Reroute" not in hybridload.errors.__all__ and not hasattr(hybridload.errors, "Reroute")
    again = pickle.loads(pickle.dumps(Reroute("sample 3 (a.png) is not a JPEG")))
    assert type(again) is Reroute and str(again) == "sample 3 (a.png) is not a JPEG"
    assert issubclass(Reroute, hybridload.errors.HybridLoadError)


def test_submit_counts_tasks_in_flight_until_each_is_reported():
    lane, got = HeldLane(), []
    lane.submit(task(0), lambda t, r: got.append((t.seq, r)))
    lane.submit(task(1), lambda t, r: got.append((t.seq, r)))
    assert lane.in_flight == 2
    lane.finish(1)
    assert lane.in_flight == 1 and got == [(1, "ok")]
    lane.finish(0, RuntimeError("x"))
    assert lane.in_flight == 0 and [s for s, _ in got] == [1, 0]


def test_a_second_report_of_one_task_is_dropped_with_a_warning(caplog):
    lane, got = HeldLane(), []
    lane.submit(task(0), lambda t, r: got.append(r))
    done = lane.pending[0]
    done(task(0), "first")
    with caplog.at_level(logging.WARNING, logger="hybridload"):
        done(task(0), "second")
    assert got == ["first"] and lane.in_flight == 0
    assert "held reported batch 0 a second time" in caplog.text


def test_a_start_that_raises_reaches_the_caller_and_leaves_nothing_in_flight():
    lane = HeldLane(refuse=ValueError("no room"))
    with pytest.raises(ValueError, match="no room"):
        lane.submit(task(0), lambda t, r: pytest.fail("done must not be called"))
    assert lane.in_flight == 0


def test_submit_after_close_is_a_clear_error_and_close_runs_once_across_threads():
    lane = HeldLane()
    barrier = threading.Barrier(8)

    def close():
        barrier.wait()
        lane.close()

    threads = [threading.Thread(target=close) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    lane.close()
    assert lane.closed and lane.closes == 1
    with pytest.raises(RuntimeError, match="the held lane is closed"):
        lane.submit(task(0), lambda t, r: None)


def test_the_in_process_lane_through_the_template(photo_root):
    lane = InProcessLane(sources.ImageFolder(photo_root), REC, threads=2)
    got, ev = [], threading.Event()
    try:
        lane.submit(task(0, 4), lambda t, r: (got.append(r), ev.set()))
        assert ev.wait(WAIT_S) and got[0].images.shape[0] == 4
        assert lane.in_flight == 0
    finally:
        lane.close()
        lane.close()
    with pytest.raises(RuntimeError, match="the inprocess lane is closed"):
        lane.submit(task(1, 4), lambda t, r: None)


# ------------------------------------------------------------------ the GpuLane skeleton
@pytest.mark.parametrize("budget_mb,want", [(None, 2), (1e6, 2), (0.01, 1), (0.0, 1)])
def test_the_memory_budget_sets_how_many_batches_a_gpu_lane_holds(budget_mb, want):
    assert batches_within(budget_mb, batch_bytes=2**20) == want


class SizesEngine(GpuLane):
    """A made-up engine on CPU tensors: each sample becomes a constant image of its byte count
    modulo 256; ``trouble`` is raised by the decode step instead (classified as every engine's)."""

    trouble: Exception | None = None
    released = 0

    def describe(self) -> str:
        return "sizes engine"

    def _decode(self, task, batch):
        from hybridload.lanes._gpu.failures import rerouting

        with rerouting(f"decoding batch {task.seq}"):
            if self.trouble is not None:
                raise self.trouble
            return [len(p) % 256 for p in batch.payloads]

    def _augment(self, task, batch, decoded):
        return torch.stack([torch.full((3, 32, 32), v, dtype=torch.uint8) for v in decoded])

    def _release(self):
        self.released += 1


def sizes_engine(photo_root, rec=REC, **kw) -> SizesEngine:
    return SizesEngine(sources.ImageFolder(photo_root), rec, batch_size=4, device="cpu", **kw)


def test_the_gpu_skeleton_reads_decodes_augments_and_delivers(photo_root):
    src = sources.ImageFolder(photo_root)
    lane = sizes_engine(photo_root, normalize_output=False)
    try:
        assert (lane.name, lane.kind, lane.slots, lane.parallelism) == ("gpu", LaneKind.GPU, 2, 1)
        result = lane.run_batch(task(2, 4))
        assert isinstance(result, GpuBatchResult) and result.ready is None and result.lane == "gpu"
        sizes = [len(src.read(src.ref(i))[0]) % 256 for i in range(2, 6)]
        assert result.images[:, 0, 0, 0].tolist() == sizes and result.images.dtype == torch.uint8
        assert result.indices.tolist() == [2, 3, 4, 5]
        assert result.labels.tolist() == [src.ref(i).label for i in range(2, 6)]
    finally:
        lane.close()


def test_the_gpu_skeleton_normalizes_when_asked(photo_root):
    lane = sizes_engine(photo_root, recipe.imagenet_train(32, normalize=True), normalize_output=True)
    try:
        images = lane.run_batch(task(0, 4)).images
        assert images.dtype == torch.float32 and images.abs().max() < 5  # mean and std applied
    finally:
        lane.close()


def test_the_gpu_skeleton_reroutes_a_samples_decode_problem_and_raises_the_rest(photo_root):
    lane = sizes_engine(photo_root)
    try:
        lane.trouble = RuntimeError("Error while decoding JPEG images")
        with pytest.raises(Reroute, match="decoding batch 0"):
            lane.run_batch(task(0, 4))
        lane.trouble = torch.cuda.OutOfMemoryError("CUDA out of memory")
        with pytest.raises(torch.cuda.OutOfMemoryError):
            lane.run_batch(task(1, 4))
    finally:
        lane.close()


def test_the_gpu_skeleton_submits_on_its_thread_and_closes_once(photo_root):
    lane = sizes_engine(photo_root)
    got, ev = [], threading.Event()
    lane.submit(task(0, 4), lambda t, r: (got.append(r), ev.set()))
    assert ev.wait(WAIT_S) and got[0].images.shape[0] == 4
    lane.close()
    lane.close()
    assert lane.released == 1 and lane._pool._shutdown
    with pytest.raises(RuntimeError, match="the gpu lane is closed"):
        lane.submit(task(1, 4), lambda t, r: None)


# ------------------------------------------------------------------ one shutdown routine
class Part:
    def __init__(self, name, fail=False, log=None):
        self.name, self.fail, self.log = name, fail, log if log is not None else []

    def close(self):
        self.log.append(self.name)
        if self.fail:
            raise RuntimeError(f"{self.name} would not close")


def test_close_all_closes_every_part_past_failures_and_names_each_failure():
    log: list = []
    parts = [
        Part("a", log=log),
        Part("b", fail=True, log=log),
        None,
        ("step c", lambda: log.append("c")),
        Part("d", fail=True, log=log),
    ]
    with pytest.raises(ShutdownError) as info:
        close_all(parts, "closing the test's parts")
    assert log == ["a", "b", "c", "d"]
    msg = str(info.value)
    assert msg.startswith("closing the test's parts: 2 part(s) failed to close")
    assert "Part 'b' (RuntimeError: b would not close)" in msg and "Part 'd'" in msg and "'a'" not in msg
    assert [n for n, _ in info.value.failures] == ["Part 'b'", "Part 'd'"]
    assert isinstance(info.value, ExceptionGroup) and len(info.value.exceptions) == 2


def test_close_all_with_a_logger_logs_instead_of_raising(caplog):
    parts = [Part("a", fail=True), Part("b")]
    with caplog.at_level(logging.WARNING, logger="hybridload"):
        close_all(parts, "closing", log=logging.getLogger("hybridload.test"))
    assert parts[1].log == ["b"] and "Part 'a' (RuntimeError: a would not close)" in caplog.text
    close_all([Part("c")], "closing")  # nothing failed: nothing raised


def test_take_all_empties_the_list_last_first():
    held = [1, 2, 3]
    assert take_all(held) == [3, 2, 1] and held == []


def test_close_lanes_closes_every_lane_and_warns_naming_the_one_that_failed(caplog):
    log: list = []
    lanes = [Part("first", log=log), Part("broken", fail=True, log=log), Part("last", log=log)]
    with caplog.at_level(logging.WARNING, logger="hybridload"):
        close_lanes(lanes)
    assert lanes == [] and log == ["last", "broken", "first"]
    assert "Part 'broken'" in caplog.text


def test_hybrid_loader_close_closes_every_lane_past_one_that_fails(photo_root):
    ld = HybridLoader(
        sources.ImageFolder(photo_root), REC, 4, policy=LoaderPolicy(cpu_actors=0, threads=2, local_workers="threads")
    )
    it = iter(ld)
    next(it)
    real = ld._lanes[0]
    ld._lanes.append(Part("broken", fail=True))
    with pytest.raises(ShutdownError, match="HybridLoader.close.*Part 'broken'"):
        ld.close()
    assert real.closed and ld._lanes == []
    ld.close()  # idempotent: nothing left to fail
    with pytest.raises(RuntimeError, match=r"close\(\)"):
        next(it)


def test_the_drop_ins_close_goes_on_past_a_failure_and_names_it():
    dl = DataLoader(list(range(8)), batch_size=2)
    log: list = []
    dl._streams.append(Part("stream", log=log))
    dl._lanes.extend([Part("pool-1", log=log), Part("pool-2", fail=True, log=log), Part("pool-3", log=log)])
    with pytest.raises(ShutdownError, match="DataLoader.close.*Part 'pool-2'") as info:
        dl.close()
    assert log == ["stream", "pool-3", "pool-2", "pool-1"] and len(info.value.failures) == 1
    assert dl._lanes == [] and dl._streams == []
    dl.close()
