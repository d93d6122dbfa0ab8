"""What every GPU engine reads for a batch, and the result it returns.

Read: the encoded bytes, the labels and each sample's parameters from the recipe (drawn
from the image header, so the boxes are the ones ``kernels/`` cuts). A sample a GPU
decoder cannot take raises :class:`Reroute`.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass
from typing import Any

import numpy as np

from hybridload.errors import Reroute, SampleError
from hybridload.kernels import BatchResult, check_pixels, image_size
from hybridload.kernels.decode import is_jpeg
from hybridload.recipe import SampleParams
from hybridload.sources.reads import read_many

from hybridload.lanes.base import BatchTask


@dataclass(frozen=True)
class BatchInput:
    """A batch's encoded payloads, labels, per-sample parameters and image sizes (w, h)."""

    payloads: list[bytes]
    labels: np.ndarray
    params: list[SampleParams]
    sizes: list[tuple[int, int]]


@dataclass
class GpuBatchResult(BatchResult):
    """A BatchResult made by a GPU engine: ``ready`` is the CUDA event recorded after its
    pixels (None on CPU); delivery makes the consumer's stream wait on it."""

    ready: Any = None


def read_batch(source, recipe, seed: int, task: BatchTask) -> BatchInput:
    """Read and check every sample of ``task``; :class:`Reroute` for one a GPU decoder cannot take."""
    labels = np.empty(len(task.indices), np.int64)
    refs = [source.ref(i) for i in task.indices.tolist()]
    with closing(read_many(source, refs)) as reads:  # concurrent where the source reads remote storage
        return _check_reads(recipe, seed, task, refs, reads, labels)


def _check_reads(recipe, seed: int, task: BatchTask, refs, reads, labels: np.ndarray) -> BatchInput:
    payloads, params, sizes = [], [], []
    for k, (ref, got) in enumerate(zip(refs, reads)):
        i = ref.index
        if isinstance(got, SampleError):  # the CPU lane reports it, or substitutes under on_error="skip"
            raise Reroute(str(got))
        payload, labels[k] = got
        if not is_jpeg(payload):
            raise Reroute(f"sample {i} ({ref.location}) is not a JPEG")
        if payload.rstrip(b"\x00")[-2:] != b"\xff\xd9":
            # truncated: GPU decoders fill the rest with grey rows; the CPU lane names it instead
            raise Reroute(f"sample {i} ({ref.location}) has no JPEG end marker")
        try:
            w, h = image_size(payload)
            check_pixels(w, h)
            params.append(recipe.sample_params(seed, task.epoch, i, w, h))
        except Exception as exc:
            raise Reroute(f"sample {i} ({ref.location}): {exc}") from None
        payloads.append(bytes(payload))
        sizes.append((w, h))
    return BatchInput(payloads, labels, params, sizes)


def record_ready(stream, host_sync: bool):
    """A CUDA event recorded on ``stream`` after the batch's work; with ``host_sync`` the lane's
    own thread waits for it (then the consumer need not)."""
    import torch
    ready = torch.cuda.Event()
    ready.record(stream)
    if host_sync:
        ready.synchronize()
    return ready
