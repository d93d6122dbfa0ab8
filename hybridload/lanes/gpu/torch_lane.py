"""The torch GPU engine: batched nvJPEG decode through torchvision, the recipe's ops as
torch ops on the GPU, from the same per-sample parameters as every other lane.

Per batch: read the bytes and draw each sample's ops (`feed.read_batch`), decode
them all in one call (``torchvision.io.decode_jpeg(list, device=...)``; EXIF orientation
ignored, as in every lane), crop/resize/flip each image (`hybridload.torchops`), stack to
uint8 and normalize on the device. On CUDA the work runs on the lane's own stream and
the result carries the CUDA event recorded after it (``result.ready``); delivery makes
the consumer's stream wait on that event.

The decode function is injectable, so the whole lane runs on CPU tensors with a CPU
decoder where torchvision cannot load.

Ordering: torchvision's batched CUDA decode writes its outputs, allocated on the lane's
stream, from a private stream that does not wait for the lane's, so the caching allocator
could hand memory the previous batch's queued kernels still read to the next decode. So
before each decode the lane waits until its own stream is idle (`wait_until_idle`); the
decode synchronises on the host anyway, so this costs the overlap of one batch's ops with
the next decode and nothing on the trainer's stream
(docs/decisions/torch-decode-waits-for-its-stream.md).
"""

from __future__ import annotations

import logging
import torch

from hybridload.delivery.transfer import resolve_device

from hybridload.lanes.base import BatchTask
from hybridload.lanes.gpu.base import GpuLane, wait_until_idle
from hybridload.lanes.gpu.failures import rerouting
from hybridload.lanes.gpu.feed import BatchInput
from hybridload.lanes.gpu.torch_decoders import Decoder, gpu_decoder, torchvision_decoder
from hybridload.torchops.ops import apply_ops_batch, stack

log = logging.getLogger(__name__)

__all__ = ["TorchGpuLane", "torchvision_decoder", "gpu_decoder"]


class TorchGpuLane(GpuLane):
    """Runs batch tasks with torchvision's decoder and torch ops on ``device``.

    Args:
        device: where the work runs (a CUDA device; a CPU device with a CPU ``decode`` in tests).
        decode: ``decode(list of 1-D uint8 tensors) -> list of CHW uint8 tensors``; default
            `torch_decoders.gpu_decoder` (torchcodec's nvJPEG, else torchvision's) on ``device``.
        gpu_memory_budget_mb, normalize_output, host_sync, gpu_threads, prep_kind: as `GpuLane`.
    """

    def __init__(
        self,
        source,
        recipe,
        *,
        batch_size: int,
        device: torch.device,
        decode: Decoder | None = None,
        gpu_memory_budget_mb: float | None = None,
        normalize_output: bool = False,
        host_sync: bool = False,
        gpu_threads: int = 2,
        prep_kind: str = "threads",
    ):
        device = resolve_device(device)
        self._decoder = decode if decode is not None else gpu_decoder(device)
        super().__init__(
            source,
            recipe,
            batch_size=batch_size,
            device=device,
            gpu_memory_budget_mb=gpu_memory_budget_mb,
            normalize_output=normalize_output,
            host_sync=host_sync,
            gpu_threads=gpu_threads,
            prep_kind=prep_kind,
        )
        log.info("%s", self.describe())

    def describe(self) -> str:
        backend = getattr(self._decoder, "backend", "injected decoder")
        engine = f"{backend} nvJPEG + torch ops" if self.on_cuda else "torch ops on CPU tensors (test engine)"
        return f"GPU lane: torch engine on {self.device}, {engine}"

    # -- one batch: one batched decode call, then each sample's ops and a stack
    def _decode(self, task: BatchTask, batch: BatchInput) -> list:
        datas = [torch.frombuffer(bytearray(p), dtype=torch.uint8) for p in batch.payloads]
        wait_until_idle(self._stream)  # the decoder writes on its own stream: nothing queued may still read
        with self.on_stream(), rerouting(f"decoding batch {task.seq}"):  # one bad image fails the batched call
            return self._decoder(datas)

    def _augment(self, task: BatchTask, batch: BatchInput, decoded) -> torch.Tensor:
        return stack(apply_ops_batch(decoded, [p.ops for p in batch.params]), self.recipe.layout)
