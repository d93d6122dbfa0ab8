"""The GPU lane: one DALI pipeline on this rank's GPU (or in DALI's CPU-only mode).

For each batch task the lane reads the encoded bytes, computes every sample's crop
window and flip from the recipe's generator (from the image header, so the boxes are
the ones ``kernels/`` cuts), feeds them through ``external_source``, runs the pipeline
and hands the output to torch through DLPack on the loader's device.

A batch the lane cannot take (a payload that is not a JPEG, a JPEG without its end
marker, a crop DALI cannot express, a decoding error) fails with :class:`Reroute`; the
scheduler then gives it to a CPU lane, which produces the exact pixels or the exact
error naming the sample.

Known limit: corruption inside a JPEG's entropy-coded data that libjpeg treats as
recoverable ("Corrupt JPEG data: premature end of data segment") is decoded by DALI
with artifacts, as DALI does on its own, while the CPU lanes decode strictly and raise.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from hybridload.errors import LaneUnavailableError, Reroute, SampleError

from .base import BatchTask, Done, LaneKind, submit_to_pool

log = logging.getLogger(__name__)


class DaliLane:
    """Runs batch tasks through a DALI pipeline compiled from the recipe.

    Args:
        device: the loader's device; a CUDA device runs DALI on that GPU ("mixed" decode),
            a CPU device runs DALI's CPU-only mode (device_id=None).
        num_threads: DALI's CPU threads.
        memory_budget_mb: upper bound on output buffers in flight (sets ``slots``).
    """

    name = "gpu"
    kind = LaneKind.GPU

    def __init__(self, source, recipe, *, seed: int, batch_size: int, device: torch.device,
                 num_threads: int = 2, memory_budget_mb: float | None = None):
        try:
            from hybridload.pipelines import build_pipeline, used_inputs
        except Exception as exc:  # pragma: no cover - the package is always installed
            raise LaneUnavailableError(f"the GPU lane cannot load its pipelines: {exc}") from exc
        try:
            import nvidia.dali  # noqa: F401
        except Exception as exc:
            raise LaneUnavailableError(
                f"the GPU lane needs NVIDIA DALI ({type(exc).__name__}: {exc}); "
                "pip install 'hybridload[dali]'") from None
        self.source, self.recipe, self.seed = source, recipe, seed
        self.device = device
        self.cpu_only = device.type != "cuda"
        device_id = None if self.cpu_only else (device.index or 0)
        batch_bytes = int(np.prod(recipe.output_shape(batch_size)))
        depth = 2
        if memory_budget_mb is not None:
            depth = max(1, min(2, int(memory_budget_mb * 2**20 // max(batch_bytes, 1))))
        self.slots = depth
        self.parallelism = 1  # one pipeline run at a time (DALI's threads work inside it)
        self._inputs = used_inputs(recipe)  # raises ValueError when the recipe does not fit
        self._pipe = build_pipeline(recipe, batch_size=batch_size, device_id=device_id,
                                    num_threads=num_threads, seed=seed)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="hybridload-gpu")
        self._closed = False
        log.info("GPU lane: DALI %s, %d threads, batch %d", "CPU-only mode" if self.cpu_only
                 else f"on cuda:{device_id}", num_threads, batch_size)

    # -- one batch
    def _feed(self, task: BatchTask):
        from hybridload.kernels import MAX_IMAGE_PIXELS, image_size
        from hybridload.kernels.decode import is_jpeg
        from hybridload.pipelines import chain_params
        encoded, params, labels = [], [], np.empty(len(task.indices), np.int64)
        for k, i in enumerate(task.indices.tolist()):
            ref = self.source.ref(i)
            try:
                payload, labels[k] = self.source.read(ref)
            except SampleError as exc:  # the CPU lane reports it, or substitutes under on_error="skip"
                raise Reroute(str(exc)) from None
            if not is_jpeg(payload):
                raise Reroute(f"sample {i} ({ref.location}) is not a JPEG")
            if payload.rstrip(b"\x00")[-2:] != b"\xff\xd9":
                # truncated: DALI would decode it with grey rows; the CPU lane names it instead
                raise Reroute(f"sample {i} ({ref.location}) has no JPEG end marker")
            try:
                w, h = image_size(payload)
                if w * h > MAX_IMAGE_PIXELS:
                    raise ValueError(f"{w}x{h} pixels exceeds the limit of {MAX_IMAGE_PIXELS}")
                params.append(chain_params(self.recipe.sample_params(self.seed, task.epoch, i, w, h), w, h))
            except Exception as exc:
                raise Reroute(f"sample {i} ({ref.location}): {exc}") from None
            encoded.append(np.frombuffer(payload, np.uint8))
        return encoded, params, labels

    def describe(self) -> str:
        return "GPU lane: " + ("DALI CPU-only mode, no GPU visible" if self.cpu_only else f"DALI on {self.device}")

    def run_batch(self, task: BatchTask):
        from hybridload.kernels import BatchResult
        from hybridload.kernels.batch import normalize_batch
        t0 = time.perf_counter()
        encoded, params, labels = self._feed(task)
        self._pipe.feed_input("encoded", encoded)
        for name in self._inputs[1:]:
            self._pipe.feed_input(name, [getattr(p, name) for p in params])
        try:
            (out,) = self._pipe.run()
        except Exception as exc:  # DALI reports a bad image for the whole batch
            raise Reroute(f"DALI failed on batch {task.seq}: {str(exc).splitlines()[0][:300]}") from None
        images = torch.from_dlpack(out.as_tensor()).clone()  # DALI reuses its buffers: take a copy
        images = normalize_batch(images, self.recipe)
        return BatchResult(images, labels, np.asarray(task.indices), [], time.perf_counter() - t0, self.name)

    # -- the lane interface
    def submit(self, task: BatchTask, done: Done) -> None:
        if self._closed:
            raise RuntimeError("the GPU lane is closed")
        submit_to_pool(self._pool, self.run_batch, task, done)

    def close(self) -> None:
        """Stop the worker thread and release the pipeline (and its GPU memory)."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pipe = None
