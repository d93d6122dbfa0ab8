"""One sample, end to end: read, decode, geometry and colour, layout (a CPU lane's batch job,
`hybridload.lanes.cpu_job.process_batch`, runs it per sample)."""

from __future__ import annotations

from typing import Callable, cast
import logging

import numpy as np
import torch

from hybridload.errors import SampleError
from hybridload.recipe import Recipe
from hybridload.recipe.stages import Decode
from hybridload.sources import Source
from hybridload.sources.reads import Reads, read_many

from hybridload.kernels.dct_scale import plan_scaled_decode, scaled_ops
from hybridload.kernels.crop_window import window_decode
from hybridload.kernels.decode import DecodeError, check_pixels, decode_image, is_jpeg, jpeg_size
from hybridload.kernels.geometry import apply_ops
from hybridload.kernels.jpeg_check import check_jpeg

log = logging.getLogger("hybridload.kernels")


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
    """The decoded image and the sample's ops on it, drawn from the header's size so only the
    crop's window (`crop_window`), maybe DCT-scaled (`dct_scale`), need be decoded; every JPEG
    passes `jpeg_check` first, as on the GPU lanes."""
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


def start_reads(source: Source, indices) -> tuple[list, Reads]:
    """The refs of ``indices`` and their reads, started now where the source reads
    concurrently (remote storage), so a lane can overlap them with the batch before."""
    refs = [source.ref(i) for i in np.asarray(indices, dtype=np.int64).tolist()]
    return refs, read_many(source, refs)
