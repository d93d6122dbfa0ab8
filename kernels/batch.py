"""One sample and one batch, end to end: read, decode, geometry and colour, layout, normalize, erase."""

from __future__ import annotations

import functools
from typing import Callable, cast
import time
import logging

import numpy as np
import torch

from hybridload.batch_result import BatchResult
from hybridload.errors import SampleError, StorageError
from hybridload.recipe import Recipe
from hybridload.recipe.core import sample_generators
from hybridload.recipe.stages import Decode
from hybridload.sources import Source
from hybridload.sources.reads import Reads, read_many

from hybridload.kernels.dct_scale import plan_scaled_decode, scaled_ops
from hybridload.kernels.crop_window import window_decode
from hybridload.kernels.decode import DecodeError, check_pixels, decode_image, is_jpeg, jpeg_size
from hybridload.kernels.erase import erase_batch
from hybridload.kernels.geometry import apply_ops
from hybridload.kernels.jpeg_check import check_jpeg

log = logging.getLogger("hybridload.kernels")
_TORCH_DTYPES = {"uint8": torch.uint8, "float32": torch.float32, "float16": torch.float16}


def process_sample(
    source: Source, recipe: Recipe, index: int, seed: int, epoch: int, out: torch.Tensor | None = None
) -> tuple[torch.Tensor, int]:
    """Read and process one sample. Writes into ``out`` (HWC or CHW per the recipe) when
    given. Returns (image, label); raises `SampleError` naming index, path, stage."""
    ref = source.ref(index)
    payload, label = source.read(ref)  # raises SampleError(stage="read")
    return process_payload(ref, payload, recipe, seed, epoch, out), label


def process_payload(
    ref,
    payload,
    recipe: Recipe,
    seed: int,
    epoch: int,
    out: torch.Tensor | None = None,
    generator: Callable[[], np.random.Generator] | None = None,
) -> torch.Tensor:
    """Decode and process one sample's read payload (see `process_sample`); ``generator``: its
    keyed generator from the batch's `sample_generators` (None: made for it)."""
    try:
        arr, ops, stages = _decode(ref, payload, recipe, seed, epoch, generator)
    except DecodeError as exc:
        raise SampleError(ref.index, ref.location, "Decode", str(exc)) from None
    try:
        img = apply_ops(arr, ops, stages)
    except Exception as exc:
        raise SampleError(
            ref.index, ref.location, getattr(exc, "stage", "geometry"), f"{type(exc).__name__}: {exc}"
        ) from None
    if tuple(img.shape[:2]) != recipe.out_hw:
        raise SampleError(
            ref.index, ref.location, "ToTensor", f"produced {tuple(img.shape[:2])}, expected {recipe.out_hw}"
        )
    chw = recipe.layout == "CHW"
    if out is None:
        return img.permute(2, 0, 1).contiguous() if chw else img.contiguous()
    out.copy_(img.permute(2, 0, 1) if chw else img)
    return out


def _decode(ref, payload, recipe: Recipe, seed: int, epoch: int, generator=None) -> tuple[np.ndarray, tuple, tuple]:
    """The decoded image and the sample's ops on it. A JPEG's ops are drawn from its header's
    size; where they start with a crop, only that window is decoded (``Decode(crop_window=True)``,
    `crop_window`), and with ``Decode(dct_scaling=True)``, where they shrink the crop
    enough, at 1/2, 1/4 or 1/8 size with the crop mapped onto that (`dct_scale`). A JPEG
    passes `jpeg_check` first, the check the GPU lanes run too, whatever part of it is decoded."""
    dec = cast(Decode, recipe.stages[0])  # Recipe refuses any other first stage
    if is_jpeg(payload):
        check_jpeg(payload)
    size = jpeg_size(payload) if dec.dct_scaling or dec.crop_window else None
    if size is None:
        arr = decode_image(payload)
        params = recipe.sample_params(seed, epoch, ref.index, arr.shape[1], arr.shape[0], generator)
        return arr, params.ops, params.stages
    check_pixels(*size)  # as the full decode does, before any pixel is decoded
    params = recipe.sample_params(seed, epoch, ref.index, *size, generator=generator)
    if dec.crop_window:
        got = window_decode(bytes(payload), size, params.ops, dec.dct_scaling, dec.reducing_gap)
        if got is not None:
            return got[0], got[1], params.stages
    plan = plan_scaled_decode(*size, params.ops, dec.reducing_gap) if dec.dct_scaling else None
    arr = decode_image(payload, plan)
    if plan is None:
        return arr, params.ops, params.stages
    return arr, scaled_ops(params.ops, plan.denominator, arr.shape[1], arr.shape[0]), params.stages


@functools.lru_cache(maxsize=32)
def _scale_bias(mean: tuple, std: tuple, layout: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (1, 3, 1, 1) if layout == "CHW" else (1, 1, 1, 3)
    scale = torch.tensor([1.0 / (255.0 * s) for s in std], dtype=torch.float32).view(shape)
    bias = torch.tensor([-m / s for m, s in zip(mean, std)], dtype=torch.float32).view(shape)
    return scale.to(device), bias.to(device)  # once per device: no host-device copy per batch


def normalize_batch(buf: torch.Tensor, recipe: Recipe) -> torch.Tensor:
    """Apply the recipe's Normalize and output dtype to a uint8 batch, on its device."""
    norm = recipe.normalize
    dtype = _TORCH_DTYPES[recipe.dtype]
    if norm is None:
        return buf if dtype == torch.uint8 else buf.to(dtype)
    scale, bias = _scale_bias(tuple(norm.mean), tuple(norm.std), recipe.layout, buf.device)
    out = buf.to(torch.float32).mul_(scale).add_(bias)
    return out if dtype == torch.float32 else out.to(dtype)


def normalize_and_erase(images: torch.Tensor, recipe: Recipe, seed: int, epoch: int, indices) -> torch.Tensor:
    """Normalize a uint8 batch, then apply the recipe's RandomErasing (boxes keyed by seed, epoch
    and each sample's index): the last two ops of every recipe, wherever the batch is finished."""
    out = normalize_batch(images, recipe)
    stage = recipe.erasing
    return out if stage is None else erase_batch(out, stage, recipe.layout, seed, epoch, indices)


def start_reads(source: Source, indices) -> tuple[list, Reads]:
    """The refs of ``indices`` and their reads, started now where the source reads
    concurrently (remote storage), so a lane can overlap them with the batch before."""
    refs = [source.ref(i) for i in np.asarray(indices, dtype=np.int64).tolist()]
    return refs, read_many(source, refs)


def process_batch(
    source: Source,
    recipe: Recipe,
    indices,
    seed: int,
    epoch: int,
    on_error: str = "raise",
    pin_memory: bool = False,
    lane: str = "",
    normalize: bool = True,
    started: tuple[list, Reads] | None = None,
    out: torch.Tensor | None = None,
) -> BatchResult:
    """Process a batch of dataset indices into one stacked tensor.

    With ``on_error="raise"`` the first bad sample raises `SampleError`; with
    ``"skip"`` it is replaced by a zero image (then normalized like any other), its
    label kept, and recorded in ``BatchResult.skipped`` — except a
    `StorageError` (the storage failed, not the sample), raised
    under either. ``started``: the batch's
    `start_reads`, when the lane started them earlier. ``out``: a uint8 tensor of the
    batch's shape to write the images into (e.g. a shared-memory slot) instead of a new one.
    """
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
    try:
        for k, (ref, got) in enumerate(zip(refs, reads)):
            try:
                if isinstance(got, SampleError):
                    raise got
                payload, labels[k] = got
                process_payload(ref, payload, recipe, seed, epoch, buf[k], functools.partial(keyed.generator, k))
            except SampleError as exc:
                if on_error != "skip" or isinstance(exc, StorageError):  # an outage is not bad data
                    raise
                buf[k].zero_()
                labels[k] = _label_without_read(source, ref.index)
                skipped.append((exc.index, exc.path, exc.stage, exc.reason))
                log.warning("substituted a zero image for %s", exc)
    finally:
        reads.close()
    images = buf
    if normalize:  # the whole recipe here: the two ops delivery applies to a lane's uint8 batch
        images = normalize_and_erase(buf, recipe, seed, epoch, idx)
    return BatchResult(images, labels, idx, skipped, time.perf_counter() - t0, lane)


def _label_without_read(source: Source, index: int) -> int:
    return int(source.ref(index).label)
