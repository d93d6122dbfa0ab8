"""The DALI GPU engine: one pipeline on this rank's GPU (or DALI's CPU-only mode), fed each sample's
crop window and flip through ``external_source``, its output handed to torch through DLPack. A
sample it cannot take is rerouted to a CPU lane; DALI decodes damage that leaves a JPEG's structure
whole with artifacts, where the CPU lanes raise (docs/guide/guarantees.md)."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import torch

from hybridload.errors import LaneUnavailableError
from hybridload.delivery._transfer import resolve_device

from hybridload.lanes import _once as once
from hybridload.lanes._base import BatchTask, Reroute
from hybridload.lanes._gpu.base import GpuLane, wait_until_idle
from hybridload.lanes._gpu.failures import confirm_on_cpu
from hybridload.lanes._gpu.feed import BatchInput
from hybridload._extras import install_hint

log = logging.getLogger(__name__)


#: the one warning of DALI's CPU-only mode, said once per process
CPU_ONLY_WARNING = (
    "hybridload: the GPU lane runs DALI's CPU-only mode (no GPU visible): a stand-in on the CPUs, no speed-up"
)


def _warn_cpu_only() -> None:
    """One loud warning per process: DALI's CPU-only mode is a stand-in, not a GPU lane."""
    if once.first_time(CPU_ONLY_WARNING):  # a log line too where logging captures warnings (the CLI)
        warnings.warn(CPU_ONLY_WARNING, RuntimeWarning, stacklevel=3)


class DaliLane(GpuLane):
    """Runs batch tasks through a DALI pipeline compiled from the recipe.

    Args:
        device: a CUDA device runs DALI on that GPU, a CPU device DALI's CPU-only mode.
        gpu_threads: DALI's CPU threads. gpu_memory_budget_mb, normalize_output, host_sync: as
            `GpuLane`.

    Raises:
        LaneUnavailableError: DALI is missing, or its pipeline did not build here.
        ValueError: the recipe does not fit the DALI chain.
    """

    def __init__(
        self,
        source,
        recipe,
        *,
        batch_size: int,
        device: torch.device,
        gpu_threads: int = 2,
        gpu_memory_budget_mb: float | None = None,
        normalize_output: bool = False,
        host_sync: bool = False,
    ):
        from hybridload._pipelines import build_pipeline, compile, used_inputs

        try:
            import nvidia.dali  # noqa: F401
        except Exception as exc:
            raise LaneUnavailableError(
                f"the GPU lane needs NVIDIA DALI ({type(exc).__name__}: {exc}); "
                f"{install_hint('dali-cu12')} or, for CUDA 13, {install_hint('dali-cu13')}"
            ) from None
        device = resolve_device(device)
        self.cpu_only = device.type != "cuda"
        self.device_id = None if self.cpu_only else device.index
        self.gpu_threads = gpu_threads
        self._plan = compile(recipe)  # raises ValueError when the recipe does not fit
        self._inputs = used_inputs(recipe)
        try:
            self._pipe = build_pipeline(
                recipe, batch_size=batch_size, device_id=self.device_id, num_threads=gpu_threads
            )  # no random op in it: the draws come in
        except RuntimeError as exc:
            raise LaneUnavailableError(
                f"DALI could not build its pipeline on {device} ({str(exc).splitlines()[0][:300]})"
            ) from None
        super().__init__(
            source,
            recipe,
            batch_size=batch_size,
            device=device,
            gpu_memory_budget_mb=gpu_memory_budget_mb,
            normalize_output=normalize_output,
            host_sync=host_sync,
        )
        if self.cpu_only:
            _warn_cpu_only()
        said = f"{self.describe()}, {gpu_threads} thread{'s' if gpu_threads != 1 else ''}, batch {batch_size}"
        if once.first_time(said):  # a lane per measurement in `hybridload profile`: said once
            log.info("%s", said)

    def describe(self) -> str:
        return "GPU lane: " + ("DALI CPU-only mode, no GPU visible" if self.cpu_only else f"DALI on {self.device}")

    # -- one batch: the pipeline decodes and augments; its output becomes a torch tensor
    def _decode(self, task: BatchTask, batch: BatchInput):
        from hybridload._pipelines import chain_params

        try:
            params = [chain_params(p, w, h, self._plan) for p, (w, h) in zip(batch.params, batch.sizes)]
        except ValueError as exc:  # a crop DALI's ROI decoding cannot express
            raise Reroute(f"batch {task.seq}: {exc}") from None
        self._pipe.feed_input("encoded", [np.frombuffer(p, np.uint8) for p in batch.payloads])
        for name in self._inputs[1:]:
            self._pipe.feed_input(name, [getattr(p, name) for p in params])
        wait_until_idle(self._stream)  # the last batch's copy of DALI's buffers has run before they are reused
        try:  # DALI reports a bad image for the whole batch
            (out,) = self._pipe.run()
        except Exception as exc:  # "Failed to decode sample #k" says no cause: the CPU kernels settle it
            confirm_on_cpu(exc, batch.payloads, f"DALI on batch {task.seq}")
        return out

    def _augment(self, task: BatchTask, batch: BatchInput, decoded) -> torch.Tensor:
        # DALI reuses its buffers on the next run(): a copy, ordered after DALI's stream by
        # from_dlpack; _decode waits for it before the next run
        return torch.from_dlpack(decoded.as_tensor()).clone()

    def _release(self) -> None:
        """Release the pipeline and DALI's unused device memory."""
        self._pipe = None
        if not self.cpu_only:
            try:
                from nvidia.dali.backend import ReleaseUnusedMemory  # type: ignore[attr-defined]  # not in its .pyi

                ReleaseUnusedMemory()
            except Exception as exc:  # an older DALI: the pool is freed at exit instead
                log.debug("DALI ReleaseUnusedMemory unavailable: %s", exc)
