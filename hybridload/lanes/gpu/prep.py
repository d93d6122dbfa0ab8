"""Where a GPU lane prepares its batches on the host: threads, or worker processes.

The preparation (`feed.read_part`: read each sample, check it, draw its keyed
parameters) holds the GIL for most of its 0.3 ms an image, so threads give overlap (with
the decode's host wait, with remote reads) but not more than one core. Worker processes
give cores: each holds the source and the recipe (sent once, at its start) and returns its
part of a batch (the payloads, labels, parameters and sizes), pickled; the parent only
unpickles. They start by ``forkserver`` (a clean process: the parent may have CUDA and
threads), so a script that builds the lane needs an ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np

from hybridload.lanes.base import BatchTask
from hybridload.lanes.gpu.feed import parts_of, read_part

PREP_KINDS = ("threads", "processes")

_WORKER: dict = {}


def _init_worker(source, recipe) -> None:
    _WORKER.update(source=source, recipe=recipe)


def _part_in_worker(seed: int, epoch: int, indices) -> object:
    return read_part(_WORKER["source"], _WORKER["recipe"], seed, epoch, indices)


class PrepPool:
    """``workers`` threads or processes that prepare a batch in parts (`start`, at once).

    Raises:
        ValueError: ``kind`` is not one of PREP_KINDS.
    """

    def __init__(self, source, recipe, workers: int, kind: str = "threads"):
        if kind not in PREP_KINDS:
            raise ValueError(f"prep kind must be one of {PREP_KINDS}, got {kind!r}")
        self.workers, self.kind = max(1, int(workers)), kind
        self._pool: Executor
        if kind == "processes":
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(["hybridload.lanes.gpu.feed"])
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=ctx, initializer=_init_worker, initargs=(source, recipe)
            )
            self._part = _part_in_worker
        else:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="hybridload-gpu-prep")
            self._part = functools.partial(self._read_part, source, recipe)

    @staticmethod
    def _read_part(source, recipe, seed, epoch, indices):
        from hybridload.lanes.gpu import feed  # looked up at call time (tests spy on it)

        return feed.read_part(source, recipe, seed, epoch, indices)

    def start(self, task: BatchTask) -> list[Future]:
        idx = np.asarray(task.indices)
        return [self._pool.submit(self._part, task.seed, task.epoch, idx[s]) for s in parts_of(len(idx), self.workers)]

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
