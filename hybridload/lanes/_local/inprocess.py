"""The in-process lane: threads in the trainer running the kernels, which release the GIL (no Ray,
and the dispatcher's tests). Its daemon threads are joined by ``close()`` within about a sample,
since a daemon thread inside torch's C++ at interpreter exit aborts the process (rc 134); only one
stuck in a sample past ``close_wait_s`` is left, so Ctrl-C stays prompt."""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from typing import Protocol

import torch

from hybridload._kernels import start_reads
from hybridload.lanes._cpu_job import process_batch

from hybridload.lanes._base import BatchTask, Done, LaneKind, PooledLane
from hybridload.lanes._batch_buffers import BatchBuffers, keep_for
from hybridload.recipe import Recipe
from hybridload.sources import Source

log = logging.getLogger(__name__)


def one_intraop_thread() -> None:
    """Run the calling thread's torch ops on that thread alone, leaving the process's setting as it
    was: a single lane thread on the shared intra-op threads ran about 7x slower
    (benchmarks/RESULTS.md). ``torch.set_num_threads`` also sets the count new threads start with,
    put back from a thread of its own."""
    with _THREADS_LOCK:
        threads = torch.get_num_threads()
        if threads == 1:
            return
        torch.set_num_threads(1)
        restore = threading.Thread(target=torch.set_num_threads, args=(threads,), name="hybridload-threads-restore")
        restore.start()
        restore.join()


_THREADS_LOCK = threading.Lock()


class DaemonPool:
    """``threads`` daemon threads (a ``ThreadPoolExecutor``'s are joined at exit) running submitted
    callables, each on one intra-op thread with ``own_intraop``."""

    def __init__(self, threads: int, name: str, own_intraop: bool = False):
        self._own_intraop = own_intraop
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._work, name=f"{name}_{k}", daemon=True) for k in range(threads)]
        for t in self.threads:
            t.start()

    def submit(self, fn, *args) -> Future:
        fut: Future = Future()
        self._queue.put((fut, fn, args))
        return fut

    def _work(self) -> None:
        if self._own_intraop:
            one_intraop_thread()
        while True:
            item = self._queue.get()
            if item is None:
                return
            self._run(*item)
            del item  # holds no finished batch while waiting for the next (its buffer is reused)

    @staticmethod
    def _run(fut: Future, fn, args) -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            result = fn(*args)
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(result)

    def shutdown(self, wait_s: float) -> list[threading.Thread]:
        """Cancel queued work, let idle threads end, wait at most ``wait_s`` for busy ones; returns
        those still running."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in self.threads:
            self._queue.put(None)
        deadline = time.monotonic() + wait_s
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [t for t in self.threads if t.is_alive()]


class StopFlag(Protocol):
    """A flag a batch reads before each sample (a `threading.Event`, or a byte in shared memory)."""

    def is_set(self) -> bool: ...


class StopAtSample:
    """A batch's reads that end the batch before its next sample once ``stop`` is set."""

    def __init__(self, reads, stop: StopFlag, why):
        self._reads, self._stop, self._why = reads, stop, why

    def __iter__(self):
        return self

    def __next__(self):
        if self._stop.is_set():
            raise self._why()
        return next(self._reads)

    def close(self) -> None:
        self._reads.close()


class InProcessLane(PooledLane):
    """Runs each batch task on one of ``threads`` worker threads.

    Args:
        source: the `hybridload.sources` source to read from.
        recipe: the recipe to run on each sample.
        threads: worker threads.
        on_error: "raise" or "skip", as ``LoaderPolicy.on_error``.
        pin_memory: write batches into pinned memory (for a CUDA device).
    """

    name = "inprocess"
    kind = LaneKind.CPU_LOCAL
    close_wait_s = 2.0  #: how long ``close()`` waits for running batches before leaving them

    def __init__(
        self, source: Source, recipe: Recipe, *, threads: int, on_error: str = "raise", pin_memory: bool = False
    ):
        super().__init__()
        self.source, self.recipe = source, recipe
        self.on_error, self.pin_memory = on_error, pin_memory
        # one batch queued beyond the threads, its reads started on acceptance: a thread that
        # finishes starts the next at once
        self.slots = threads + 1
        self.parallelism = threads
        self._pool = DaemonPool(threads, "hybridload-inprocess", own_intraop=threads == 1)
        # batches are written into kept buffers (`batch_buffers`); pinned ones are made per batch
        self._buffers = BatchBuffers(0 if pin_memory else keep_for(self.slots))
        self._tasks: list[tuple[BatchTask, Future, threading.Event]] = []  # submitted, not yet finished

    def describe(self) -> str:
        return f"in-process lane: {self.parallelism} threads"

    def _start(self, task: BatchTask, done: Done) -> None:
        stop = threading.Event()
        try:  # the reads start now: they overlap the batches before it
            refs, reads = start_reads(self.source, task.indices)
            started = (refs, StopAtSample(reads, stop, lambda: self._cancelled(task)))
        except Exception:  # a bad index or ref: raised again where the batch runs, reported as usual
            started = None
        entry = (task, self._pool.submit(self.run_batch, task, started), stop)
        with self._lock:
            self._tasks.append(entry)

        def finish(fut: Future) -> None:  # names no entry: a future reaching itself would hold its batch until gc
            with self._lock:
                self._tasks = [e for e in self._tasks if e[1] is not fut]
            if fut.cancelled():
                done(task, self._cancelled(task))
            else:
                exc = fut.exception()
                done(task, exc if exc is not None else fut.result())

        entry[1].add_done_callback(finish)

    def _cancelled(self, task: BatchTask) -> RuntimeError:
        why = "the lane was closed" if self._closed else "its pass was given up"
        return RuntimeError(f"batch {task.seq} (epoch {task.epoch}) was cancelled on the {self.name} lane: {why}")

    def cancel(self, task: BatchTask) -> None:
        """Drop ``task`` if it has not started; stop it before its next sample if it runs."""
        with self._lock:
            mine = [(fut, stop) for t, fut, stop in self._tasks if t is task]
        for fut, stop in mine:
            stop.set()
            fut.cancel()

    def run_batch(self, task: BatchTask, started=None):
        out = None if self.pin_memory else self._buffers.take(self.recipe.output_shape(len(task.indices)))
        return process_batch(
            self.source,
            self.recipe,
            task.indices,
            task.seed,
            task.epoch,
            on_error=self.on_error,
            pin_memory=self.pin_memory,
            lane=self.name,
            started=started,
            out=out,
        )  # uint8 out: the loader normalizes on its device

    def _close(self) -> None:
        """Cancel every task (running ones stop before their next sample); wait at most
        ``close_wait_s``, then leave the threads still in a sample."""
        with self._lock:
            tasks = list(self._tasks)
        for _task, _fut, stop in tasks:
            stop.set()
        self._buffers.clear()
        for t in self._pool.shutdown(self.close_wait_s):
            log.info(
                "in-process lane thread %s is still running a batch after close(); it is a daemon "
                "thread and ends when that batch returns (or with the process)",
                t.name,
            )
