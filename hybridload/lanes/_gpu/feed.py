"""What every GPU engine reads for a batch (bytes, labels, each sample's parameters drawn from its
header, so the boxes are the CPU kernels'), checked as the CPU lanes check before decoding, and the
result it returns; prepared in parts (`parts_of`, `join_batch`) because one thread capped the torch
engine far below nvJPEG."""

from __future__ import annotations

import functools
from concurrent.futures import Future
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import numpy as np

from hybridload.errors import SampleError
from hybridload._batch_result import BatchResult
from hybridload._kernels import check_pixels, image_size
from hybridload._kernels.decode import is_jpeg
from hybridload._kernels.jpeg_check import check_jpeg
from hybridload.recipe._core import sample_generators
from hybridload.recipe import SampleParams
from hybridload.sources._reads import read_many

from hybridload.lanes._base import BatchTask, Reroute


@dataclass(frozen=True)
class BatchInput:
    """A batch's encoded payloads, labels, per-sample parameters and image sizes (w, h)."""

    payloads: list[bytes]
    labels: np.ndarray
    params: list[SampleParams]
    sizes: list[tuple[int, int]]


@dataclass
class GpuBatchResult(BatchResult):
    """A GPU engine's BatchResult: ``ready`` is the CUDA event after its pixels (None on CPU), which
    the consumer's stream waits on."""

    ready: Any = None


MIN_PART = 16  # samples: smaller parts cost more in hand-offs than they save


def read_batch(source, recipe, task: BatchTask) -> BatchInput:
    """Read and check every sample of ``task`` (its parameters keyed by the task's seed and epoch);
    `Reroute` for one a GPU decoder cannot take."""
    return read_part(source, recipe, task.seed, task.epoch, task.indices)


def read_part(source, recipe, seed: int, epoch: int, indices) -> BatchInput:
    """`read_batch` for some of a batch's samples (``indices``, in order)."""
    indices = np.asarray(indices)
    labels = np.empty(len(indices), np.int64)
    refs = [source.ref(i) for i in indices.tolist()]
    with closing(read_many(source, refs)) as reads:  # concurrent where the source reads remote storage
        return _check_reads(recipe, seed, epoch, refs, reads, labels)


def parts_of(n: int, workers: int) -> list[slice]:
    """``n`` samples cut into at most ``workers`` contiguous parts of at least MIN_PART (one when small)."""
    k = max(1, min(workers, n // MIN_PART))
    bounds = [round(j * n / k) for j in range(k + 1)]
    return [slice(a, b) for a, b in zip(bounds, bounds[1:])]


def join_batch(parts: list[Future]) -> BatchInput:
    """The parts put back in order; the first part's Reroute (or error), in sample order, is raised."""
    done = [f.result() for f in parts]
    if len(done) == 1:
        return done[0]
    return BatchInput(
        [p for d in done for p in d.payloads],
        np.concatenate([d.labels for d in done]),
        [p for d in done for p in d.params],
        [s for d in done for s in d.sizes],
    )


def _check_reads(recipe, seed: int, epoch: int, refs, reads, labels: np.ndarray) -> BatchInput:
    payloads, params, sizes = [], [], []
    keyed = sample_generators(seed, epoch, [r.index for r in refs])  # the CPU lanes' keyed draws, made at once
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
            check_jpeg(payload)  # what the CPU lanes refuse before decoding, GPU decoders would decode
            params.append(recipe.sample_params(seed, epoch, i, w, h, functools.partial(keyed.generator, k)))
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
