"""`GpuLane`, the skeleton the DALI and torch engines fill in with ``_decode`` and ``_augment``:
device, stream, memory budget, one worker thread, host preparation started on acceptance, failure
classification and a result the consumer's stream waits on (docs/guide/concepts.md, "The GPU
lanes")."""

from __future__ import annotations

import abc
import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from hybridload.delivery._transfer import resolve_device
from hybridload.delivery._finish import finish_batch

from hybridload.lanes._base import BatchTask, LaneKind, PooledLane
from hybridload.lanes._gpu.feed import BatchInput, GpuBatchResult, join_batch, record_ready
from hybridload.lanes._gpu import ranges
from hybridload.lanes._gpu.prep import PrepPool
from hybridload.lanes._spec import budget_bytes

MAX_DEPTH = 2  # batches in flight on a GPU lane: one running, one queued behind it


def wait_until_idle(stream) -> None:
    """Block until ``stream``'s queued kernels have run (None: nothing to wait for): torchvision's
    nvJPEG writes from a private stream that does not wait for the lane's, and DALI reuses its
    output buffers on the next ``run()`` (docs/decisions/torch-decode-waits-for-its-stream.md)."""
    if stream is not None:
        stream.synchronize()


def batches_within(gpu_memory_budget_mb: float | None, batch_bytes: int, most: int = MAX_DEPTH) -> int:
    """Batches a GPU lane holds at once: ``most``, fewer when the budget holds fewer (at least one)."""
    budget = budget_bytes(gpu_memory_budget_mb)
    if budget is None:
        return most
    return max(1, min(most, budget // max(batch_bytes, 1)))


class GpuLane(PooledLane):
    """A GPU engine's lane: one batch at a time on its own thread and, on CUDA, its own stream.

    Args:
        device: the loader's device (``"cuda"`` is the current CUDA device).
        gpu_memory_budget_mb: upper bound on output buffers in flight (sets ``slots``).
        normalize_output: finish the batch (Normalize, RandomErasing) in the lane, on the device;
            False (the loader's way): uint8 out, delivery finishes it.
        host_sync: the lane's thread waits for each batch's event, for a delivery that does not wait
            on ``result.ready``; False: the loader's way.
        gpu_threads: threads (or processes) of the host preparation, each batch in that many parts.
        prep_kind: "threads" (overlap, one core's worth) or "processes" (cores; the script needs a
            ``__main__`` guard).
    """

    name = "gpu"
    kind = LaneKind.GPU

    def __init__(
        self,
        source,
        recipe,
        *,
        batch_size: int,
        device,
        gpu_memory_budget_mb: float | None = None,
        normalize_output: bool = False,
        host_sync: bool = False,
        gpu_threads: int = 2,
        prep_kind: str = "threads",
    ):
        super().__init__()
        self.source, self.recipe = source, recipe
        self.device = resolve_device(device)
        self.on_cuda = self.device.type == "cuda"
        self._normalize, self.host_sync = normalize_output, host_sync
        self.slots = batches_within(gpu_memory_budget_mb, int(np.prod(recipe.output_shape(batch_size))))
        self.parallelism = 1  # one batch at a time (an engine's own threads work inside it)
        self._stream = torch.cuda.Stream(device=self.device) if self.on_cuda else None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="hybridload-gpu")
        self._prep = PrepPool(source, recipe, gpu_threads, prep_kind)
        self.gpu_threads = self._prep.workers
        self._started: dict[int, list] = {}  # id(task) -> its preparation's futures

    def on_stream(self):
        """The lane's CUDA stream as torch's current stream (nothing on a CPU device)."""
        return torch.cuda.stream(self._stream) if self.on_cuda else contextlib.nullcontext()

    def _start_prep(self, task: BatchTask):
        return self._prep.start(task)

    def runner(self, task: BatchTask):
        """Start the task's host preparation now, while an earlier batch decodes."""
        self._started[id(task)] = self._start_prep(task)  # the task object lives until run_batch runs
        return self.run_batch

    def run_batch(self, task: BatchTask) -> GpuBatchResult:
        """The batch on this thread: wait for its host preparation, decode, augment;
        ``read_seconds`` is that wait, the rest of ``seconds`` the decode+augment as the host sees
        it."""
        parts = self._started.pop(id(task), None) or self._start_prep(task)
        marked = ranges.ranges_on(self.device)  # asked once a batch: a flag read while nobody records
        t0 = time.perf_counter()  # the lane's own time: not the wait behind the batch before
        with ranges.nvtx_range("hybridload.gpu.read", marked):
            batch = join_batch(parts)
        read_s = time.perf_counter() - t0
        with ranges.nvtx_range("hybridload.gpu.decode", marked):
            decoded = self._decode(task, batch)
        with self.on_stream(), ranges.nvtx_range("hybridload.gpu.augment", marked):
            images = self._augment(task, batch, decoded)
            if self._normalize:
                images = finish_batch(images, self.recipe, task.seed, task.epoch, task.indices)
            ready = record_ready(self._stream, self.host_sync) if self.on_cuda else None
        out = GpuBatchResult(
            images,
            batch.labels,
            np.asarray(task.indices),
            [],
            time.perf_counter() - t0,
            self.name,
            ready=ready,
            worker=threading.current_thread().name,
        )
        out.read_seconds = read_s
        return out

    # -- what an engine fills in
    @abc.abstractmethod
    def _decode(self, task: BatchTask, batch: BatchInput):
        """The batch's decoded pixels, in the engine's own form; raises Reroute for a sample's problem."""

    @abc.abstractmethod
    def _augment(self, task: BatchTask, batch: BatchInput, decoded) -> torch.Tensor:
        """The batch as one uint8 tensor on the device (runs on the lane's stream)."""

    def _release(self) -> None:
        """Release what the engine holds beyond the skeleton (runs once, at close)."""

    def _close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._prep.shutdown()
        self._started.clear()
        self._stream = None
        self._release()
