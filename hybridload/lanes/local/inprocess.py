"""The in-process lane: threads in the trainer's process running ``kernels/`` directly.

For debugging, for machines without Ray, and for testing the dispatcher and merger.
JPEG decoding (libjpeg-turbo) and torch's resize release the GIL, so threads scale
across cores.

Its threads are daemon threads of its own pool (not a ``ThreadPoolExecutor``, whose threads
the interpreter joins at exit): ``close()`` cancels queued batches and does not wait for a
running one beyond a short bound, so Ctrl-C ends the process promptly even while a sample
takes minutes; an abandoned thread ends when its batch returns, or with the process.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future

from hybridload.kernels import process_batch, start_reads

from hybridload.lanes.base import BatchTask, LaneKind, PooledLane
from hybridload.recipe import Recipe
from hybridload.sources import Source

log = logging.getLogger(__name__)


class DaemonPool:
    """``threads`` daemon threads running submitted callables; ``submit`` returns a Future."""

    def __init__(self, threads: int, name: str):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._work, name=f"{name}_{k}", daemon=True)
                        for k in range(threads)]
        for t in self.threads:
            t.start()

    def submit(self, fn, *args) -> Future:
        fut: Future = Future()
        self._queue.put((fut, fn, args))
        return fut

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as exc:
                fut.set_exception(exc)
            else:
                fut.set_result(result)

    def shutdown(self, wait_s: float) -> list[threading.Thread]:
        """Cancel queued work, let idle threads end, wait at most ``wait_s`` for busy ones;
        returns the threads still running (abandoned: daemon threads)."""
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


class InProcessLane(PooledLane):
    """Runs each batch task on one of ``threads`` worker threads.

    Args:
        source: the `hybridload.sources` source to read from.
        recipe: the recipe to run on each sample.
        seed: the stream's seed (draws keyed by (seed, epoch, index)).
        threads: worker threads.
        on_error: "raise" or "skip", as ``LoaderPolicy.on_error``.
        pin_memory: write batches into pinned memory (for a CUDA device).
    """

    name = "inprocess"
    kind = LaneKind.CPU_LOCAL
    close_wait_s = 2.0  #: how long ``close()`` waits for running batches before leaving them

    def __init__(self, source: Source, recipe: Recipe, *, seed: int, threads: int, on_error: str = "raise",
                 pin_memory: bool = False):
        super().__init__()
        self.source, self.recipe, self.seed = source, recipe, seed
        self.on_error, self.pin_memory = on_error, pin_memory
        # one batch queued behind the running ones, its reads started when it is accepted: a
        # thread that finishes a batch starts the next at once, with its remote reads (if any)
        # already done, instead of idling until the dispatcher has heard of it
        self.slots = threads + 1
        self.parallelism = threads
        self._pool = DaemonPool(threads, "hybridload-inprocess")

    def describe(self) -> str:
        return f"in-process lane: {self.parallelism} threads"

    def runner(self, task: BatchTask):
        """``run_batch`` with the task's reads started now (they overlap the batches before it)."""
        try:
            started = start_reads(self.source, task.indices)
        except Exception:  # a bad index or ref: raised again where the batch runs, reported as usual
            return self.run_batch
        return lambda t: self.run_batch(t, started)

    def run_batch(self, task: BatchTask, started=None):
        return process_batch(self.source, self.recipe, task.indices, self.seed, task.epoch,
                             on_error=self.on_error, pin_memory=self.pin_memory, lane=self.name,
                             normalize=False, started=started)  # uint8 out: the loader normalizes on its device

    def _close(self) -> None:
        """Cancel queued tasks; wait at most ``close_wait_s`` for running ones, then leave them."""
        for t in self._pool.shutdown(self.close_wait_s):
            log.info("in-process lane thread %s is still running a batch after close(); it is a daemon "
                     "thread and ends when that batch returns (or with the process)", t.name)
