"""Where a GPU lane prepares batches on the host: threads (overlap, not more than a core: the work
holds the GIL) or worker processes started by ``forkserver``, since the parent may hold CUDA and
threads."""

from __future__ import annotations

import functools
import multiprocessing as mp
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np

from hybridload.lanes._base import BatchTask
from hybridload.lanes._gpu.feed import parts_of, read_part

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
            ctx.set_forkserver_preload(["hybridload.lanes._gpu.feed"])
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=ctx, initializer=_init_worker, initargs=(source, recipe)
            )
            self._part = _part_in_worker
        else:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="hybridload-gpu-prep")
            self._part = functools.partial(self._read_part, source, recipe)

    @staticmethod
    def _read_part(source, recipe, seed, epoch, indices):
        from hybridload.lanes._gpu import feed  # looked up at call time (tests spy on it)

        return feed.read_part(source, recipe, seed, epoch, indices)

    def start(self, task: BatchTask) -> list[Future]:
        idx = np.asarray(task.indices)
        return [self._pool.submit(self._part, task.seed, task.epoch, idx[s]) for s in parts_of(len(idx), self.workers)]

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
