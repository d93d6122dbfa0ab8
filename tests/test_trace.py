"""The trace of the loader's own work (`hybridload.execution._trace`): a pass on two real lanes
(threads and worker processes), one slowed, written as trace-event JSON and read back with
``json``; the trainer-side ranges inside torch's profiler; the cost of the hook while off."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import WorkerLost
from hybridload.execution._pass_config import PassConfig
from hybridload.execution._retry import StragglerRule
from hybridload.execution._stats import LoaderStats
from hybridload.execution._stream import BatchStream
from hybridload.execution._trace import recording
from hybridload.lanes._base import BatchTask
from hybridload.lanes._local.inprocess import InProcessLane
from hybridload.lanes._local.process import ProcessLane

WAIT_S = 60.0
BATCHES = 16
REC = recipe.imagenet_eval(32)


class Tiles:
    """A map-style dataset of small uint8 images, label = index."""

    def __len__(self):
        return 2 * BATCHES

    def __getitem__(self, i):
        return np.full((40, 40, 3), i % 256, np.uint8), i


class SlowedLane(InProcessLane):
    """Threads: its third batch sleeps (a straggler the dispatcher issues again), its fifth fails
    once with a lost worker (a retry)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.name, self.calls, self._count = "threads", 0, threading.Lock()

    def run_batch(self, task, started=None):
        with self._count:
            self.calls += 1
            n = self.calls
        if n == 3:
            time.sleep(1.5)
        if n == 5:
            raise WorkerLost("a worker of the slowed lane died (the test's)")
        return super().run_batch(task, started)


def _trace_of_a_two_lane_pass(tmp_path):
    src = sources.TorchDataset(Tiles())
    slowed = SlowedLane(src, REC, threads=2)
    procs = ProcessLane(src, REC, workers=1, batch_size=2)
    procs.name = "processes"
    stats = LoaderStats()
    tasks = [BatchTask(k, 0, np.array([2 * k, 2 * k + 1]), size=2) for k in range(BATCHES)]
    config = PassConfig(
        window=6, batch_timeout_s=WAIT_S, stragglers=StragglerRule(straggler_factor=3.0, straggler_min_s=0.5)
    )
    path = tmp_path / "run.json"
    try:
        with recording(stats, path), BatchStream([slowed, procs], tasks, config, hooks=stats) as stream:
            got = [r.indices.tolist() for r in stream]
    finally:
        slowed.close()
        procs.close()
    assert got == [[2 * k, 2 * k + 1] for k in range(BATCHES)]
    with open(path) as f:
        return json.load(f), stats


def test_the_trace_holds_every_batch_once_on_its_lane_with_the_retry_and_reissue_marked(tmp_path):
    doc, stats = _trace_of_a_two_lane_pass(tmp_path)
    events = doc["traceEvents"]
    spans = [e for e in events if e["ph"] == "X" and e["cat"] == "work" and e["args"]["kept"]]
    stages = Counter((e["args"]["seq"], e["args"]["stage"]) for e in spans)
    assert stages == {(k, stage): 1 for k in range(BATCHES) for stage in ("read", "decode+augment")}, stages
    kept = [e for e in spans if e["args"]["stage"] == "decode+augment"]
    counts = stats.as_dict()["lanes"]
    for lane in ("threads", "processes"):  # each kept batch on the lane stats() counts it on
        assert sum(e["args"]["lane"] == lane for e in kept) == counts[lane]["batches"], (lane, counts)
    rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    for e in kept:  # each on its worker's row: a lane thread, or the process lane's worker
        worker = rows[(e["pid"], e["tid"])]
        prefix = "hybridload-inprocess" if e["args"]["lane"] == "threads" else "hybridload-worker-0"
        assert worker.startswith(prefix) and worker == e["args"]["worker"], (worker, e)
    marks = defaultdict(list)
    for e in events:
        if e["ph"] == "i":
            marks[e["name"]].append(e["args"])
    assert [m["lane"] for m in marks["retry"]] == ["threads"] and stats.as_dict()["retries"] == 1, marks
    assert [m["lane"] for m in marks["reissue"]] == ["threads"] and stats.as_dict()["reissued"] == 1, marks
    assert not marks["error"] and not marks["skip"], marks
    lane_tracks = Counter((e["ph"], e["cat"]) for e in events if e.get("cat") in ("lane", "merger"))
    assert lane_tracks[("b", "lane")] == lane_tracks[("e", "lane")] >= BATCHES  # a copy back after the pass: none
    assert lane_tracks[("b", "merger")] == lane_tracks[("e", "merger")] == BATCHES
    stalls = [e["args"]["seq"] for e in events if e["name"] == "stall"]
    assert stalls == list(range(BATCHES))


def test_spans_on_each_worker_row_do_not_overlap(tmp_path):
    doc, _stats = _trace_of_a_two_lane_pass(tmp_path)
    by_row = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            by_row[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    assert len(by_row) >= 3  # the trainer's row, a lane thread, the worker process
    for row, spans in by_row.items():
        spans.sort()
        for (_s0, end0, a), (start1, _e1, b) in zip(spans, spans[1:]):
            assert start1 >= end0, f"row {row}: {a} ends at {end0} after {b} starts at {start1}"


def test_each_batch_is_a_read_span_then_a_decode_span_on_its_workers_row(tmp_path):
    doc, _stats = _trace_of_a_two_lane_pass(tmp_path)
    copies = defaultdict(dict)  # (row, seq, kept) -> stage -> span; both local lanes tell the two apart
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == "work":
            a = e["args"]
            assert a["stage"] not in copies[(e["pid"], e["tid"], a["seq"], a["kept"])], e
            copies[(e["pid"], e["tid"], a["seq"], a["kept"])][a["stage"]] = e
    lanes = {key: c["read"]["args"]["lane"] for key, c in copies.items()}
    assert set(lanes.values()) == {"threads", "processes"} and len(copies) >= BATCHES, lanes
    for key, c in copies.items():
        assert set(c) == {"read", "decode+augment"}, (key, c)
        read, decode = c["read"], c["decode+augment"]
        seq = key[2]
        assert (read["name"], decode["name"]) == (f"read {seq}", f"decode {seq}")
        assert read["ts"] + read["dur"] <= decode["ts"], (read, decode)  # the read first, no overlap
        assert decode["dur"] > 0, decode  # the tiles are resized and cropped: never instant


def test_a_loader_traces_only_inside_its_block_and_the_trace_is_trace_event_json(photo_root, tmp_path):
    path = tmp_path / "loader.json"
    policy = LoaderPolicy(cpu_actors=0, threads=2)
    with HybridLoader(sources.ImageFolder(photo_root), REC, 4, policy=policy, device="cpu", shuffle=False) as loader:
        n = len(loader)
        with loader.trace(path) as tracer:
            assert sum(1 for _ in loader) == n
        list(loader)  # after the block: nothing more recorded
        with pytest.raises(RuntimeError, match="already being traced"):
            with loader.trace(tmp_path / "outer.json"), loader.trace(tmp_path / "inner.json"):
                pass
    doc = json.loads(path.read_text())
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] == "ms"
    for e in doc["traceEvents"]:
        assert {"ph", "name", "pid", "tid"} <= set(e), e
        assert e["ph"] == "M" or isinstance(e["ts"], (int, float)), e
    names = Counter(e["name"] for e in doc["traceEvents"])
    assert names["stall"] == names["hybridload.to_device"] == n, names
    assert len(tracer.events()) >= len(doc["traceEvents"])


def test_a_trace_over_two_epochs_numbers_the_passes_and_holds_each_passs_batch_once(photo_root, tmp_path):
    path = tmp_path / "epochs.json"
    policy = LoaderPolicy(cpu_actors=0, threads=2)
    with HybridLoader(sources.ImageFolder(photo_root), REC, 4, policy=policy, device="cpu") as loader:
        n = len(loader)
        with loader.trace(path):
            for epoch in (0, 1):
                loader.set_epoch(epoch)
                assert sum(1 for _ in loader) == n
    events = json.loads(path.read_text())["traceEvents"]
    kept = Counter(
        (e["args"]["pass"], e["args"]["seq"], e["args"]["stage"])
        for e in events
        if e["ph"] == "X" and e["cat"] == "work" and e["args"]["kept"]
    )
    assert kept == {(p, k, s): 1 for p in (1, 2) for k in range(n) for s in ("read", "decode+augment")}, kept
    stalls = [(e["args"]["pass"], e["args"]["seq"]) for e in events if e["name"] == "stall"]
    assert stalls == [(p, k) for p in (1, 2) for k in range(n)], stalls
    waits = Counter(e["args"]["pass"] for e in events if e["ph"] == "e" and e["cat"] == "merger")
    assert waits == {1: n, 2: n}, waits  # each pass's batches waited in its own merger


def test_trainer_side_spans_are_ranges_in_torchs_profiler(photo_root):
    hook = lambda images, labels, generator: (images, labels)  # noqa: E731
    policy = LoaderPolicy(cpu_actors=0, threads=2)
    with HybridLoader(
        sources.ImageFolder(photo_root), REC, 4, policy=policy, device="cpu", shuffle=False, batch_transform=hook
    ) as loader:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _k, _batch in zip(range(3), loader):
                pass
    names = {e.name for e in prof.events()}
    wanted = {"hybridload.wait_for_batch", "hybridload.to_device", "hybridload.batch_transform"}
    assert wanted <= names, sorted(n for n in names if n.startswith("hybridload"))


def test_the_trainer_side_ranges_open_no_profiler_range_while_nothing_records(monkeypatch):
    """While neither torch's profiler nor a trace records, a span is a bare yield: it never
    enters ``record_function`` and reads no clock (its cost is a generator's, not a range's)."""
    import torch

    from hybridload.execution import _trace as trace

    def refuse(*a, **k):
        raise AssertionError("record_function entered while nothing records")

    monkeypatch.setattr(torch.profiler, "record_function", refuse)
    clock = {"reads": 0}
    real = trace.time.perf_counter

    def counted():
        clock["reads"] += 1
        return real()

    monkeypatch.setattr(trace.time, "perf_counter", counted)
    for _ in range(100):
        with trace.span("hybridload.to_device", None):
            pass
    assert clock["reads"] == 0
