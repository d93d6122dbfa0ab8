"""The torch GPU engine: batched nvJPEG decode through torchvision, the recipe's ops as
torch ops on the GPU, from the same per-sample parameters as every other lane.

Per batch: read the bytes and draw each sample's ops (:func:`.feed.read_batch`), decode
them all in one call (``torchvision.io.decode_jpeg(list, device=...)``; EXIF orientation
ignored, as in every lane), crop/resize/flip each image (:mod:`.torch_ops`), stack to
uint8 and normalize on the device. On CUDA the work runs on the lane's own stream and
the result carries the CUDA event recorded after it (``result.ready``); delivery makes
the consumer's stream wait on that event.

The decode function is injectable, so the whole lane runs on CPU tensors with a CPU
decoder where torchvision cannot load.
"""

from __future__ import annotations

import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

import numpy as np
import torch

from hybridload.errors import LaneUnavailableError
from hybridload.kernels.batch import finish_batch

from hybridload.lanes.base import BatchTask, LaneKind, PooledLane
from hybridload.lanes.gpu.failures import reroute_or_raise
from hybridload.lanes.gpu.feed import GpuBatchResult, read_batch, record_ready
from hybridload.lanes.gpu.torch_ops import apply_ops, stack

log = logging.getLogger(__name__)

Decoder = Callable[[Sequence[torch.Tensor]], list]


def torchvision_decoder(device: torch.device) -> Decoder:
    """Batched decode through torchvision's nvJPEG (RGB, EXIF orientation ignored)."""
    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except Exception as exc:
        raise LaneUnavailableError(f"the torch GPU engine needs torchvision ({type(exc).__name__}: {exc}); "
                                   "pip install 'hybridload[torch-gpu]'") from None

    def decode(datas: Sequence[torch.Tensor]) -> list:
        return decode_jpeg(list(datas), mode=ImageReadMode.RGB, device=device, apply_exif_orientation=False)
    return decode


class TorchGpuLane(PooledLane):
    """Runs batch tasks with torchvision's decoder and torch ops on ``device``.

    Args:
        device: where the work runs (a CUDA device; a CPU device with a CPU ``decode`` in tests).
        decode: ``decode(list of 1-D uint8 tensors) -> list of CHW uint8 tensors``; default
            torchvision's nvJPEG on ``device``.
        normalize_output: apply the recipe's Normalize (and RandomErasing, as delivery does) in the lane (the loader's delivery does
            not normalize yet); the pixels stay uint8 until this last step.
        host_sync: on CUDA, the lane's worker thread waits for each batch's event, so a
            delivery that does not wait on ``result.ready`` is still safe; False once
            delivery makes the consumer's stream wait on the event (no host wait at all).
    """

    name = "gpu"
    kind = LaneKind.GPU

    def __init__(self, source, recipe, *, seed: int, batch_size: int, device: torch.device,
                 decode: Decoder | None = None, memory_budget_mb: float | None = None,
                 normalize_output: bool = True, host_sync: bool = True):
        self.source, self.recipe, self.seed = source, recipe, seed
        self.device = torch.device(device)
        self._cuda = self.device.type == "cuda"
        self._decode = decode if decode is not None else torchvision_decoder(self.device)
        self._normalize, self.host_sync = normalize_output, host_sync
        batch_bytes = int(np.prod(recipe.output_shape(batch_size)))
        depth = 2
        if memory_budget_mb is not None:
            depth = max(1, min(2, int(memory_budget_mb * 2**20 // max(batch_bytes, 1))))
        self.slots = depth
        self.parallelism = 1  # one batch at a time on the lane's stream
        self._stream = torch.cuda.Stream(device=self.device) if self._cuda else None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="hybridload-gpu")
        self._closed = False
        log.info("%s", self.describe())

    def describe(self) -> str:
        engine = "torchvision nvJPEG + torch ops" if self._cuda else "torch ops on CPU tensors (test engine)"
        return f"GPU lane: torch engine on {self.device}, {engine}"

    def run_batch(self, task: BatchTask) -> GpuBatchResult:
        t0 = time.perf_counter()
        batch = read_batch(self.source, self.recipe, self.seed, task)
        datas = [torch.frombuffer(bytearray(p), dtype=torch.uint8) for p in batch.payloads]
        ctx = torch.cuda.stream(self._stream) if self._cuda else contextlib.nullcontext()
        with ctx:
            try:
                decoded = self._decode(datas)
            except Exception as exc:  # one bad image fails the whole batched call
                reroute_or_raise(exc, f"decoding batch {task.seq}")
            images = [apply_ops(img, p.ops) for img, p in zip(decoded, batch.params)]
            out = stack(images, self.recipe.layout)
            if self._normalize:
                out = finish_batch(out, self.recipe, self.seed, task.epoch, task.indices)
            ready = record_ready(self._stream, self.host_sync) if self._cuda else None
        return GpuBatchResult(out, batch.labels, np.asarray(task.indices), [], time.perf_counter() - t0,
                              self.name, ready=ready)


    def close(self) -> None:
        """Stop the worker thread; the caching allocator keeps freed blocks for the trainer."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._stream = None
