"""The torch GPU engine: one batched nvJPEG decode, then the recipe's ops as torch ops on the
device, from the same per-sample parameters as every lane. Before each decode it waits until its
stream is idle, since the decoder writes from a stream of its own
(docs/decisions/torch-decode-waits-for-its-stream.md); the decoder is injectable, so the lane runs
on CPU tensors in tests."""

from __future__ import annotations

import logging
import torch

from hybridload.delivery._transfer import resolve_device

from hybridload.lanes._base import BatchTask
from hybridload.lanes._gpu.base import GpuLane, wait_until_idle
from hybridload.lanes._gpu.failures import rerouting
from hybridload.lanes._gpu.feed import BatchInput
from hybridload.lanes._gpu.torch_decoders import Decoder, gpu_decoder, torchvision_decoder
from hybridload._torchops.ops import apply_ops_batch, stack

log = logging.getLogger(__name__)

__all__ = ["TorchGpuLane", "torchvision_decoder", "gpu_decoder"]


class TorchGpuLane(GpuLane):
    """Runs batch tasks with a batched JPEG decoder and torch ops on ``device``.

    Args:
        device: where the work runs (a CUDA device; a CPU device with a CPU ``decode`` in tests).
        decode: ``decode(list of 1-D uint8 tensors) -> list of CHW uint8 tensors``; default
            `torch_decoders.gpu_decoder` on ``device``. gpu_memory_budget_mb, normalize_output,
            host_sync, gpu_threads, prep_kind: as `GpuLane`.
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
