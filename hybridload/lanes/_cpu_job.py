"""A CPU lane's batch job, the same in threads, worker processes, Ray actors and the planner's rate
probe, so the probe times exactly what the lanes run (`hybridload._kernels.batch.process_payloads`)."""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from typing import Any

import numpy as np
import torch

from hybridload._batch_result import BatchResult
from hybridload.errors import SampleError, StorageError
from hybridload._keyed import KeyedGenerators
from hybridload._kernels.batch import GROUP, process_payloads, start_reads
from hybridload.recipe import Recipe
from hybridload.recipe._core import sample_generators
from hybridload.sources import Source
from hybridload.sources._reads import Reads

log = logging.getLogger("hybridload._kernels")
_END = object()


def process_batch(
    source: Source,
    recipe: Recipe,
    indices,
    seed: int,
    epoch: int,
    on_error: str = "raise",
    pin_memory: bool = False,
    lane: str = "",
    started: tuple[list, Reads] | None = None,
    out: torch.Tensor | None = None,
) -> BatchResult:
    """A batch of dataset indices into one uint8 tensor in the recipe's layout, the whole of a CPU
    lane's work (Normalize and RandomErasing are delivery's, for every lane alike).

    Under ``on_error="skip"`` a bad sample becomes a zero image recorded in ``skipped``, but a
    `StorageError` (an outage, not bad data) raises under either. ``started``: the reads the lane
    started earlier; ``out``: a tensor of the batch's shape to write into (a shared-memory slot).
    ``read_seconds`` is the wait for bytes (reads overlap decoding), the rest of ``seconds``
    decode+augment, as the trace draws them."""
    t0 = time.perf_counter()
    idx = np.asarray(indices, dtype=np.int64)
    shape = recipe.output_shape(len(idx))
    if out is not None and (tuple(out.shape) != tuple(shape) or out.dtype != torch.uint8):
        raise ValueError(
            f"process_batch: out must be a uint8 tensor of shape {tuple(shape)}, got {out.dtype} {tuple(out.shape)}"
        )
    buf = out if out is not None else torch.empty(shape, dtype=torch.uint8, pin_memory=pin_memory)
    labels = np.empty(len(idx), dtype=np.int64)
    skipped = []
    refs, reads = started if started is not None else start_reads(source, idx)
    keyed = sample_generators(seed, epoch, [r.index for r in refs])  # keyed at once, as each sample is
    read_s = time.perf_counter() - t0  # the reads' start, then each wait for a sample's bytes
    try:
        g0, ended = 0, False
        while g0 < len(refs) and not ended:  # a group's reads, then its samples step by step
            outcomes: list[Any] = []
            while g0 + len(outcomes) < len(refs) and len(outcomes) < GROUP:
                r0 = time.perf_counter()
                got: Any = next(reads, _END)  # an outcome: (payload, label) or the SampleError
                read_s += time.perf_counter() - r0
                if got is _END:
                    ended = True
                    break
                outcomes.append(got)
                if isinstance(got, SampleError):
                    if on_error != "skip" or isinstance(got, StorageError):
                        break  # raised once the samples before it are done: no read past it
                elif not isinstance(got[0], (bytes, bytearray, memoryview)):
                    break  # decoded already: nothing to group for, and held together they cost pages
            payloads = [None if isinstance(got, SampleError) else got[0] for got in outcomes]
            for j, got in enumerate(outcomes):
                if not isinstance(got, SampleError):
                    labels[g0 + j] = got[1]
            errors = process_payloads(
                refs[g0 : g0 + len(outcomes)],
                payloads,
                recipe,
                seed,
                epoch,
                buf[g0:],
                functools.partial(_nth_generator, keyed, g0),
            )
            for j, got in enumerate(outcomes):  # each sample's error in order, as one at a time
                exc = got if isinstance(got, SampleError) else errors[j]
                if exc is None:
                    continue
                if not isinstance(exc, SampleError) or on_error != "skip" or isinstance(exc, StorageError):
                    raise exc  # an outage is not bad data
                k = g0 + j
                buf[k].zero_()
                if isinstance(got, SampleError):  # a sample whose bytes were read keeps their label
                    labels[k] = _label_without_read(source, refs[k].index)
                skipped.append((exc.index, exc.path, exc.stage, exc.reason))
                log.warning("substituted a zero image for %s", exc)
            g0 += len(outcomes)
    finally:
        reads.close()
    seconds, worker = time.perf_counter() - t0, f"{threading.current_thread().name} (pid {os.getpid()})"
    node, read_seconds = socket.gethostname(), min(read_s, seconds)
    return BatchResult(buf, labels, idx, skipped, seconds, lane, worker, node, read_seconds)


def _nth_generator(keyed: KeyedGenerators, start: int, j: int) -> np.random.Generator:
    return keyed.generator(start + j)


def _label_without_read(source: Source, index: int) -> int:
    return int(source.ref(index).label)
