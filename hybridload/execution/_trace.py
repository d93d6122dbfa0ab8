"""`Tracer`: the loader's own work as Chrome trace-event JSON (Perfetto, chrome://tracing), and
`span`, a trainer-side range torch's profiler shows too; what each row shows and why every time is
the trainer's clock: docs/guide/tuning.md. The dispatcher's thread writes the batch events, the
trainer's thread the rest: one lock."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import weakref
from typing import Any, Iterator

from hybridload._compat import torch_profiler_on
from hybridload.lanes._gpu import ranges

TRAINER = "trainer"


class Tracer:
    """Collects the trace events of the passes it is attached to; ``write(path)`` saves them.

    Args:
        path: where ``write()`` puts the JSON (``{"traceEvents": [...], ...}``).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()
        self._events: list[dict[str, Any]] = []
        self._host = socket.gethostname()
        self._pids: dict[str, int] = {}  # node -> its process row
        self._tids: dict[tuple[str, str], int] = {}  # (node, worker) -> its thread row
        self._row_end: dict[tuple[int, int], float] = {}  # the last span's end on a row, in us
        self._arrived: dict[tuple[int, int], float] = {}  # (pass, seq) -> when its kept result reached the merger
        # a pass's merger -> its number in this trace: seq numbers start again with every pass
        self._passes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # no pass kept alive by its trace
        self._passes_seen = 0

    # ------------------------------------------------------------------ rows
    def _pass(self, key: Any) -> int:
        """The number of the pass ``key`` (its merger) stands for, in the order first seen; 0 for
        none. Under the lock."""
        if key is None:
            return 0
        if key not in self._passes:
            self._passes_seen += 1  # not len(): a finished pass's merger may be gone from the map
            self._passes[key] = self._passes_seen
        return self._passes[key]

    def _us(self, t: float) -> float:
        return round((t - self._t0) * 1e6, 1)

    def _row(self, node: str, worker: str) -> tuple[int, int]:
        """(pid, tid) of a worker's row, named on first use. Under the lock."""
        node = node or self._host
        if node not in self._pids:
            pid = self._pids[node] = len(self._pids) + 1
            label = f"{node} (trainer)" if node == self._host else node
            self._events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}})
        key = (node, worker)
        if key not in self._tids:
            self._tids[key] = len(self._tids) + 1
            meta = {"ph": "M", "name": "thread_name", "pid": self._pids[node], "tid": self._tids[key]}
            self._events.append({**meta, "args": {"name": worker}})
        return self._pids[node], self._tids[key]

    def _span(self, row: tuple[int, int], name: str, start: float, end: float, cat: str, args: dict) -> None:
        """A complete event on ``row``, kept after the row's last one (a later result can arrive
        first). Under the lock."""
        begin = max(self._us(start), self._row_end.get(row, 0.0))
        dur = round(max(0.0, self._us(end) - begin), 1)
        self._row_end[row] = begin + dur  # as a reader adds them: the next span starts at or after it
        pid, tid = row
        event = {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": begin, "dur": dur}
        self._events.append({**event, "args": args})

    # ------------------------------------------------------------------ the dispatcher's thread
    def batch(
        self, seq: int, lane: str, issued: float, done: float, result: Any, kept: bool, pass_key: Any = None
    ) -> None:
        """A copy of batch ``seq`` of the pass ``pass_key`` came back from ``lane`` at ``done``,
        issued at ``issued``."""
        worker = getattr(result, "worker", "") or lane
        seconds = min(float(getattr(result, "seconds", 0.0) or 0.0), done - issued)
        read = getattr(result, "read_seconds", None)
        with self._lock:
            npass = self._pass(pass_key)
            args = {"seq": seq, "pass": npass, "lane": lane, "worker": worker, "kept": kept}
            row = self._row(getattr(result, "node", ""), worker)
            start = done - seconds
            if read is None:  # the lane cannot tell its reads from its decoding
                self._span(row, f"batch {seq}", start, done, "work", {**args, "stage": "work"})
            else:
                split = start + min(max(float(read), 0.0), seconds)
                self._span(row, f"read {seq}", start, split, "work", {**args, "stage": "read"})
                self._span(row, f"decode {seq}", split, done, "work", {**args, "stage": "decode+augment"})
            pid, _tid = row
            common = {"cat": "lane", "name": f"{lane} batch {seq}", "id": f"{lane}-{seq}-{len(self._events)}"}
            self._events.append({**common, "ph": "b", "pid": pid, "tid": 0, "ts": self._us(issued), "args": args})
            self._events.append({**common, "ph": "e", "pid": pid, "tid": 0, "ts": self._us(done)})
            if kept:
                self._arrived[(npass, seq)] = done
                for index, path, stage, reason in getattr(result, "skipped", ()) or ():
                    skip = {"index": index, "path": str(path), "stage": stage, "reason": reason}
                    self._instant_locked("skip", {"seq": seq, "pass": npass, **skip})

    def instant(self, name: str, pass_key: Any = None, **args: Any) -> None:
        """A marked moment (``retry``, ``reissue``, ``error``, ``skip``), its ``pass`` from
        ``pass_key``."""
        with self._lock:
            self._instant_locked(name, {**args, "pass": self._pass(pass_key)})

    def _instant_locked(self, name: str, args: dict) -> None:
        pid, tid = self._row("", TRAINER)
        now = self._us(time.perf_counter())
        self._events.append(
            {"ph": "i", "s": "p", "name": name, "cat": "event", "pid": pid, "tid": tid, "ts": now, "args": args}
        )

    # ------------------------------------------------------------------ the trainer's thread
    def taken(self, seq: int, asked: float, got: float, pass_key: Any = None) -> None:
        """The trainer asked for batch ``seq`` of the pass ``pass_key`` at ``asked`` and had it at ``got``."""
        with self._lock:
            row = self._row("", TRAINER)
            npass = self._pass(pass_key)
            self._span(row, "stall", asked, got, "trainer", {"seq": seq, "pass": npass})
            arrived = self._arrived.pop((npass, seq), None)
            if arrived is not None:
                pid, _tid = row
                common = {"cat": "merger", "name": f"merger wait {seq}", "id": f"merge-{seq}-{len(self._events)}"}
                self._events.append({**common, "ph": "b", "pid": pid, "tid": 0, "ts": self._us(arrived)})
                self._events.append(
                    {
                        **common,
                        "ph": "e",
                        "pid": pid,
                        "tid": 0,
                        "ts": self._us(got),
                        "args": {"seq": seq, "pass": npass},
                    }
                )

    def trainer_span(self, name: str, start: float, end: float) -> None:
        """A delivery step on the trainer's row (``to_device``, ``batch_transform``)."""
        with self._lock:
            self._span(self._row("", TRAINER), name, start, end, "trainer", {})

    # ------------------------------------------------------------------ output
    def events(self) -> list[dict[str, Any]]:
        """The events so far (a copy)."""
        with self._lock:
            return list(self._events)

    def write(self, path: str | os.PathLike | None = None) -> str:
        """Save the trace as Chrome trace-event JSON; returns the path written."""
        out = os.fspath(path) if path is not None else self.path
        doc = {
            "traceEvents": self.events(),
            "displayTimeUnit": "ms",
            "otherData": {"clock": "the trainer's time.perf_counter(), from the trace's start", "host": self._host},
        }
        tmp = f"{out}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(json.dumps(doc, separators=(",", ":")))  # dumps runs in C; dump's chunks ran 4x slower
        os.replace(tmp, out)
        return out


@contextlib.contextmanager
def recording(stats: Any, path: str | os.PathLike) -> Iterator[Tracer]:
    """Attach a `Tracer` to ``stats`` while the block runs; write it to ``path`` when the block ends,
    even on an error. A second block on the same ``stats`` while one records is a RuntimeError.

    Args:
        stats: the loader's hooks (its `LoaderStats`), which every pass's dispatcher and stream read.
        path: the JSON file to write.
    """
    if getattr(stats, "trace", None) is not None:
        raise RuntimeError("trace(): this loader is already being traced; end the first `with loader.trace(...)` block")
    tracer = Tracer(path)
    stats.trace = tracer
    ranges.trace_started()  # the GPU lane's NVTX ranges, on CUDA, while a trace records
    try:
        yield tracer
    finally:
        ranges.trace_ended()
        stats.trace = None
        tracer.write()


@contextlib.contextmanager
def span(name: str, tracer: Tracer | None) -> Iterator[None]:
    """``name`` as a ``record_function`` range while torch's profiler records, and on ``tracer``'s
    trainer row."""
    ranged = torch_profiler_on()
    t0 = time.perf_counter() if tracer is not None else 0.0
    if ranged:
        import torch

        with torch.profiler.record_function(name):
            yield
    else:
        yield
    if tracer is not None:
        tracer.trainer_span(name, t0, time.perf_counter())
