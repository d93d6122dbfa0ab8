"""The in-process lane: threads in the trainer's process running ``kernels/`` directly.

For debugging, for machines without Ray, and for testing the dispatcher and merger.
JPEG decoding (libjpeg-turbo) and torch's resize release the GIL, so threads scale
across cores.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from hybridload.kernels import process_batch

from .base import BatchTask, LaneKind, PooledLane

log = logging.getLogger(__name__)


class InProcessLane(PooledLane):
    """Runs each batch task on one of ``threads`` worker threads."""

    name = "inprocess"
    kind = LaneKind.CPU_LOCAL

    def __init__(self, source, recipe, *, seed: int, threads: int, on_error: str = "raise",
                 pin_memory: bool = False):
        self.source, self.recipe, self.seed = source, recipe, seed
        self.on_error, self.pin_memory = on_error, pin_memory
        self.slots = threads
        self.parallelism = threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="hybridload-inprocess")
        self._closed = False

    def describe(self) -> str:
        return f"in-process lane: {self.parallelism} threads"

    def run_batch(self, task: BatchTask):
        return process_batch(self.source, self.recipe, task.indices, self.seed, task.epoch,
                             on_error=self.on_error, pin_memory=self.pin_memory, lane=self.name,
                             normalize=False)  # uint8 out: the loader normalizes on its device


    def close(self, join_timeout_s: float = 10.0) -> None:
        """Cancel queued tasks and wait (bounded) for running ones to finish."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + join_timeout_s
        for t in list(getattr(self._pool, "_threads", ())):
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                log.warning("in-process lane thread %s is still running a task after close(); "
                            "it will exit when that task returns", t.name)
