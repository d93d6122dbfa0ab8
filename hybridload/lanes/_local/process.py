"""The process lane: worker processes running the same batch job as the threads (so the stream is
bit-identical), each batch written whole into a shared-memory slot as torch's workers hand theirs
over, then copied into a kept buffer. Each worker has a task queue and results pipe of its own, so a
worker killed at any moment shares no lock or half-written message and its pipe ends; its batches
end in `WorkerLost` and a fresh worker takes its place (the rules: docs/guide/concepts.md, "The
local lanes"; docs/decisions/process-lane-pipe-per-worker.md)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from multiprocessing import connection, shared_memory

import numpy as np
import torch

from hybridload.errors import WorkerLost
from hybridload._batch_result import BatchResult

from hybridload.lanes._base import BatchTask, Done, Lane, LaneKind
from hybridload.lanes._local import process_worker
from hybridload.lanes._batch_buffers import BatchBuffers, keep_for
from hybridload.lanes._local.process_worker import process_identity, release_channels, shm_view, stop_now, stop_workers

log = logging.getLogger(__name__)

MAX_RESTARTS_PER_WORKER = 2  # a worker that keeps dying (a crash at start-up) is not restarted for ever
POLL_S = 0.1  # how often the collector looks at worker liveness while idle
JOIN_TIMEOUT_S = 1.0  # workers get this long, together, to exit after their stop message; the batch
# in progress is discarded anyway, so close() does not wait it out


class ProcessLane(Lane):
    """Runs each batch task in one of ``workers`` worker processes."""

    name = "processes"
    kind = LaneKind.CPU_LOCAL

    def __init__(
        self,
        source,
        recipe,
        *,
        workers: int,
        batch_size: int,
        on_error: str = "raise",
        pin_memory: bool = False,
        tasks_per_worker: int = 2,
        start_method: str = "fork",
    ):
        super().__init__()  # self._lock guards the closed flag and this lane's slots and tasks alike
        self.source, self.recipe = source, recipe
        self.on_error, self.pin_memory = on_error, pin_memory
        self.parallelism = workers
        self.slots = workers * tasks_per_worker
        self._ctx = process_worker.context(start_method)
        slot_bytes = int(np.prod(recipe.output_shape(batch_size)))  # uint8, as every lane ships (the loader normalizes)
        self._shm = [shared_memory.SharedMemory(create=True, size=max(1, slot_bytes)) for _ in range(self.slots)]
        self._flags = shared_memory.SharedMemory(create=True, size=self.slots)  # a byte a slot: its task was cancelled
        self._free = list(range(self.slots))
        self._buffers = BatchBuffers(0 if pin_memory else keep_for(self.slots))
        self._pending: deque[tuple[BatchTask, Done]] = deque()  # tasks that found no free slot
        self._inflight: list[dict[int, tuple[BatchTask, Done, int]]] = [{} for _ in range(workers)]
        self._next_id = 0
        self._restarts = 0
        self._procs: list = [None] * workers
        self._queues: list = [None] * workers
        self._results: list = [None] * workers  # each worker's results pipe (the reading end)
        try:
            for wid in range(workers):
                self._procs[wid], self._queues[wid], self._results[wid] = self._new_worker(wid)
        except BaseException:
            self.close()
            raise
        self._collector = threading.Thread(target=self._collect, name="hybridload-process-lane", daemon=True)
        self._collector.start()

    def _new_worker(self, wid: int):
        """A started worker process, its task queue and the reading end of its results pipe."""
        return process_worker.start_worker(
            self._ctx,
            f"hybridload-worker-{wid}",
            (
                self.source,
                self.recipe,
                self.on_error,
                [s.name for s in self._shm],
                (os.getpid(), process_identity(os.getpid())),
                self._flags.name,
            ),
        )

    def describe(self) -> str:
        return f"process lane: {self.parallelism} worker processes ({self._ctx.get_start_method()})"

    def run_batch(self, task: BatchTask):
        box: list = []
        ev = threading.Event()

        def done(_task, out):
            box.append(out)
            ev.set()

        self.submit(task, done)
        while not ev.wait(POLL_S):
            if self._closed:
                raise RuntimeError("ProcessLane was closed while running a batch")
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def _start(self, task: BatchTask, done: Done) -> None:
        with self._lock:
            if self._closed:  # closed since submit looked: the task must not reach a stopped worker
                raise self.closed_error()
            if not self._free:  # an earlier pass's batches still hold the slots
                self._pending.append((task, done))
                return
            alive = [w for w, p in enumerate(self._procs) if p is not None]
            if not alive:
                raise WorkerLost(process_worker.all_dead(self._ctx.get_start_method()))
            slot = self._free.pop()
            wid = min(alive, key=lambda w: len(self._inflight[w]))
            tid, self._next_id = self._next_id, self._next_id + 1
            self._inflight[wid][tid] = (task, done, slot)
            shm_view(self._flags)[slot] = 0
            self._queues[wid].put((tid, slot, task.epoch, task.seed, np.asarray(task.indices, dtype=np.int64)))

    def cancel(self, task: BatchTask) -> None:
        """Drop ``task`` if it waits for a slot; a worker running it stops before its next sample."""
        with self._lock:
            if self._closed:
                return
            dropped = [entry for entry in self._pending if entry[0] is task]
            for entry in dropped:
                self._pending.remove(entry)
            for table in self._inflight:
                for t, _done, slot in table.values():
                    if t is task:
                        shm_view(self._flags)[slot] = 1
        for t, done in dropped:
            done(t, RuntimeError(f"batch {t.seq} was cancelled on the {self.name} lane: its pass was given up"))

    # ----------------------------------------------------------------- results
    def _collect(self) -> None:
        checked = time.monotonic()
        while not self._closed:
            if time.monotonic() - checked >= POLL_S:
                self._check_workers()
                checked = time.monotonic()
            pipes = {conn: wid for wid, conn in enumerate(self._results) if conn is not None}
            if not pipes:  # every worker dead and not replaced: the lane only answers WorkerLost now
                time.sleep(POLL_S)
                continue
            try:
                ready = connection.wait(list(pipes), timeout=POLL_S)
            except (OSError, ValueError):  # a pipe was closed under us: shutting down
                return
            for conn in ready:
                self._read(pipes[conn], conn)

    def _deliver(self, wid: int, tid: int, status: str, body) -> None:
        with self._lock:
            entry = self._inflight[wid].pop(tid, None)
        if entry is None:
            return
        task, done, slot = entry
        out = self._result(task, slot, body, wid) if status == "ok" else body
        with self._lock:
            self._free.append(slot)
        done(task, out)
        self._start_pending()

    def _read(self, wid: int, conn) -> bool:
        """Deliver one result of worker ``wid``; False, its pipe closed, once the pipe ended
        (`_check_workers` ends its batches)."""
        try:
            tid, status, body = conn.recv()
        except (EOFError, OSError, ValueError):
            if self._results[wid] is conn:
                self._results[wid] = None
            conn.close()
            return False
        self._deliver(wid, tid, status, body)
        return True

    def _drain(self, wid: int) -> None:
        """Deliver the whole results a dead worker wrote before it died, then close its pipe."""
        conn = self._results[wid]
        try:
            while conn is not None and conn.poll(0) and self._read(wid, conn):
                pass
        except (OSError, ValueError):
            pass
        if conn is not None and self._results[wid] is conn:
            self._results[wid] = None
            conn.close()

    def _start_pending(self) -> None:
        """Start the tasks that waited for a slot, while slots are free."""
        while True:
            with self._lock:
                if self._closed or not self._free or not self._pending:
                    return
                task, done = self._pending.popleft()
            try:
                self._start(task, done)
            except BaseException as exc:  # no worker left: the dispatcher hands it on
                done(task, exc)

    def _result(self, task: BatchTask, slot: int, body, wid: int = 0) -> BatchResult:
        (shape, dtype), payload, labels, indices, skipped, (seconds, read_seconds) = body
        if payload is None:
            if dtype == "uint8" and not self.pin_memory:
                images = self._buffers.take(shape)
            else:
                images = torch.empty(shape, dtype=getattr(torch, dtype), pin_memory=self.pin_memory)
            # numpy's copy on this thread: torch's copy_ woke the trainer's intra-op threads (0.25
            # of a core against 0.07, RESULTS.md)
            out = images.numpy().reshape(-1).view(np.uint8)
            np.copyto(out, np.frombuffer(shm_view(self._shm[slot]), dtype=np.uint8, count=out.size))
            del out
        else:
            images = payload.pin_memory() if self.pin_memory else payload
        worker = f"hybridload-worker-{wid}"  # the worker's own split of its time travels for the trace
        return BatchResult(images, labels, indices, skipped, seconds, self.name, worker, read_seconds=read_seconds)

    def _check_workers(self) -> None:
        """Replace each dead worker and hand its batches on. The replacement starts first (slow);
        then one locked section takes the lost batches and publishes it, so no task ever goes to the
        dead worker's queue to wait out the batch timeout."""
        for wid, p in enumerate(self._procs):
            if p is None or p.is_alive() or self._closed:
                continue
            self._drain(wid)
            fresh = (None, None, None)
            if self._restarts < MAX_RESTARTS_PER_WORKER * len(self._procs):
                self._restarts += 1
                fresh = self._new_worker(wid)
            with self._lock:
                if self._closed:  # closed meanwhile: close() stops what it finds, not this one
                    stop_now(fresh[0], JOIN_TIMEOUT_S)
                    return
                lost = list(self._inflight[wid].values())
                self._inflight[wid].clear()
                self._free.extend(slot for _t, _d, slot in lost)
                self._procs[wid], self._queues[wid], self._results[wid] = fresh
            how = f"process lane worker {wid} (pid {p.pid}) died with exit code {p.exitcode}"
            kept = (
                "" if fresh[0] is not None else f"; not replaced (the lane restarted {self._restarts} workers already)"
            )
            log.warning("%s; %d batch(es) handed on%s", how, len(lost), kept)
            for task, done, _slot in lost:
                done(task, WorkerLost(f"{how} while it held batch {task.seq}"))
            self._start_pending()

    # ----------------------------------------------------------------- shutdown
    def _close(self) -> None:
        """Stop the workers (bounded join, then terminate by handle) and free the slots."""
        stop_workers(self._queues, self._procs, JOIN_TIMEOUT_S)
        collector = getattr(self, "_collector", None)
        if collector is not None and collector is not threading.current_thread():
            collector.join(JOIN_TIMEOUT_S)
        release_channels(self._queues, self._results, [*self._shm, self._flags])
        self._buffers.clear()
        while self._pending:  # never started: their pass hears the lane closed
            task, done = self._pending.popleft()
            done(task, self.closed_error())
