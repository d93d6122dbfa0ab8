"""One sample, end to end: read, decode, geometry and colour, layout; and a batch's samples through
the same steps a few at a time (a CPU lane's batch job, `hybridload.lanes._cpu_job.process_batch`,
runs `process_payloads`)."""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence, cast
import logging

import numpy as np
import torch

from hybridload.errors import SampleError
from hybridload.recipe import Recipe
from hybridload.recipe._core import SampleParams
from hybridload.recipe._ops import Crop, Flip, Resize
from hybridload.recipe._stages import Decode
from hybridload.sources import Source
from hybridload.sources._reads import Reads, read_many

from hybridload._kernels.dct_scale import plan_scaled_decode, scaled_ops
from hybridload._kernels.crop_window import window_decode
from hybridload._kernels import turbo
from hybridload._kernels.decode import DecodeError, check_pixels, decode_image, is_jpeg, jpeg_header
from hybridload._kernels.geometry import apply_ops, resize_kept
from hybridload._kernels.jpeg_check import check_jpeg

log = logging.getLogger("hybridload._kernels")

#: Samples `process_payloads` takes through each step together: the headers and parameters
#: (Python), the decodes (libjpeg-turbo), then the geometry and the write, each step's code and
#: tables still in the caches from the sample before. One sample at a time the decode evicts
#: them, and the Python and the resize around it run 1.5-5x their cost in a loop
#: (benchmarks/RESULTS.md, issue 51).
GROUP = 32
#: Decoded pixels held before the step after the decodes runs on them: bounds a group's memory
#: (a 12 MP window is up to 36 MB; a 400 px photo's ~0.3 MB).
HELD_BYTES = 8 << 20


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
        planned = _plan(ref, payload, recipe, seed, epoch, generator)
        arr, ops, stages = _decode(payload, recipe, planned)
    except DecodeError as exc:
        raise _decode_error(ref, exc) from None
    layout = _Layout.of(recipe)
    if out is None:
        return cast(torch.Tensor, _finish(ref, arr, ops, stages, layout, None))  # a new tensor without out
    _finish(ref, arr, ops, stages, layout, out.numpy())
    return out


def process_payloads(
    refs: Sequence,
    payloads: Sequence,
    recipe: Recipe,
    seed: int,
    epoch: int,
    out: torch.Tensor,
    generator: Callable[[int], np.random.Generator],
) -> list[Exception | None]:
    """`process_payload` of each sample, into ``out[j]``, `GROUP` samples a step at a time (the
    pixels, and each sample's error, as one at a time).

    Args:
        refs: the samples' refs.
        payloads: their read payloads; None for one not to process (its read failed).
        recipe: the recipe.
        seed: the loader's seed.
        epoch: the epoch.
        out: a uint8 tensor of at least ``len(refs)`` images in the recipe's layout.
        generator: ``generator(j)`` gives sample j's keyed generator (a batch's
            `sample_generators`' ``generator``), used before the next call.

    Returns:
        Each sample's error (a `SampleError`, or what a stage raised otherwise), None where
        ``out[j]`` holds its image; the caller raises or skips them in order.
    """
    errors: list[Exception | None] = [None] * len(refs)
    layout, dst = _Layout.of(recipe), out.numpy()
    for g0 in range(0, len(refs), GROUP):
        planned: dict[int, _Planned] = {}
        for j in range(g0, min(g0 + GROUP, len(refs))):  # headers and keyed parameters
            if payloads[j] is not None:
                try:
                    planned[j] = _plan(refs[j], payloads[j], recipe, seed, epoch, lambda j=j: generator(j))
                except Exception as exc:
                    errors[j] = _decode_error(refs[j], exc)
        decoded: list[tuple] = []
        held = 0
        for j, plan in planned.items():  # the decodes, finished each time they hold HELD_BYTES
            try:
                decoded.append((j, *_decode(payloads[j], recipe, plan)))
            except Exception as exc:
                errors[j] = _decode_error(refs[j], exc)
                continue
            held += decoded[-1][1].nbytes
            if held >= HELD_BYTES:
                _finish_all(decoded, refs, layout, dst, errors)
                decoded, held = [], 0
        _finish_all(decoded, refs, layout, dst, errors)
    return errors


def _finish_all(decoded: list[tuple], refs, layout: _Layout, dst: np.ndarray, errors: list) -> None:
    """`_finish` of each (j, pixels, ops, stages) into ``dst[j]``, its error into ``errors[j]``."""
    for j, arr, ops, stages in decoded:
        try:
            _finish(refs[j], arr, ops, stages, layout, dst[j])
        except Exception as exc:
            errors[j] = exc


def _decode_error(ref, exc: Exception) -> Exception:
    return SampleError(ref.index, ref.location, "Decode", str(exc)) if isinstance(exc, DecodeError) else exc


class _Planned(NamedTuple):
    size: tuple[int, int] | None  # the header's (width, height) where the window decode may run
    arr: np.ndarray | None  # else the full decode, already made
    params: SampleParams
    header: turbo.Handle | None = None  # the decompressor that read ``size``, for the window's decode


def _plan(ref, payload, recipe: Recipe, seed: int, epoch: int, generator) -> _Planned:
    """(header size, None, parameters) where only the crop's window (`crop_window`), maybe
    DCT-scaled (`dct_scale`), need be decoded; (None, full decode, parameters) otherwise. Every
    JPEG passes `jpeg_check` first, as on the GPU lanes."""
    dec = cast(Decode, recipe.stages[0])  # Recipe refuses any other first stage
    if is_jpeg(payload):
        check_jpeg(payload)
    size, header = jpeg_header(payload) if dec.dct_scaling or dec.crop_window else (None, None)
    if size is None:
        arr = decode_image(payload)
        return _Planned(None, arr, recipe.sample_params(seed, epoch, ref.index, arr.shape[1], arr.shape[0], generator))
    check_pixels(*size)  # as the full decode does, before any pixel is decoded
    return _Planned(size, None, recipe.sample_params(seed, epoch, ref.index, *size, generator=generator), header)


def _decode(payload, recipe: Recipe, planned: _Planned) -> tuple[np.ndarray, tuple, tuple]:
    """The decoded image and the sample's ops on it, from `_plan`'s answer."""
    size, params = planned.size, planned.params
    if size is None:
        return cast(np.ndarray, planned.arr), params.ops, params.stages  # _plan decoded it in full
    dec = cast(Decode, recipe.stages[0])
    if dec.crop_window:
        got = window_decode(bytes(payload), size, params.ops, dec.dct_scaling, dec.reducing_gap, planned.header)
        if got is not None:
            return got[0], got[1], params.stages
    plan = plan_scaled_decode(*size, params.ops, dec.reducing_gap) if dec.dct_scaling else None
    arr = decode_image(payload, plan)
    if plan is None:
        return arr, params.ops, params.stages
    return arr, scaled_ops(params.ops, plan.denominator, arr.shape[1], arr.shape[0]), params.stages


class _Layout(NamedTuple):
    """What `_finish` checks and writes each image as: the recipe's, read once a batch."""

    out_hw: tuple[int, int]
    chw: bool

    @staticmethod
    def of(recipe: Recipe) -> _Layout:
        return _Layout(recipe.out_hw, recipe.layout == "CHW")


def _finish(ref, arr, ops: tuple, stages: tuple, layout: _Layout, out: np.ndarray | None) -> torch.Tensor | None:
    """The ops on the decoded image, written to ``out`` (a uint8 array of one image in the
    recipe's layout; a new tensor is returned without it). With ``out``, a last Resize writes
    into this thread's kept buffer (`resize_kept`), an in-bounds leading Crop of the decoded
    array is a view of it, and a last Flip is done by the write itself, a mirrored copy costing
    what a plain one does: the same pixels, an allocation and a copy fewer."""
    mirror = bool(ops) and type(ops[-1]) is Flip
    ops, stages = (ops[:-1], stages[:-1]) if mirror else (ops, stages)
    last = ops[-1] if out is not None and ops and type(ops[-1]) is Resize else None
    try:
        if last is None:
            img = apply_ops(arr, ops, stages)
        else:
            src = _cropped(arr, ops[0]) if len(ops) == 2 and type(ops[0]) is Crop else None
            if src is None:
                src = apply_ops(arr, ops[:-1], stages).numpy()
            try:
                pixels = resize_kept(src, last)
            except Exception as exc:
                exc.stage = stages[-1]  # type: ignore[attr-defined]
                raise
    except Exception as exc:
        raise SampleError(
            ref.index, ref.location, getattr(exc, "stage", "geometry"), f"{type(exc).__name__}: {exc}"
        ) from None
    hw = (last.h, last.w) if last is not None else tuple(img.shape[:2])
    if hw != layout.out_hw:
        raise SampleError(ref.index, ref.location, "ToTensor", f"produced {hw}, expected {layout.out_hw}")
    if out is None:
        img = img.flip(1) if mirror else img
        return img.permute(2, 0, 1).contiguous() if layout.chw else img.contiguous()
    if last is None:
        pixels = img.numpy()
    if mirror:
        out = out[:, :, ::-1] if layout.chw else out[:, ::-1]
    np.copyto(out, pixels.transpose(2, 0, 1) if layout.chw else pixels)
    return None


def _cropped(arr, crop: Crop) -> np.ndarray | None:
    """`geometry.crop` of a decoded array as a view of it, where the box lies inside and the
    array is a decoder's (contiguous, writable); None otherwise, for `apply_ops` (which pads a
    box outside, copies a read-only array, names a bad one's stage)."""
    if not isinstance(arr, np.ndarray) or not (arr.flags.c_contiguous and arr.flags.writeable):
        return None
    x, y, w, h = crop.x, crop.y, crop.w, crop.h
    if x < 0 or y < 0 or x + w > arr.shape[1] or y + h > arr.shape[0]:
        return None
    return arr[y : y + h, x : x + w]


def start_reads(source: Source, indices) -> tuple[list, Reads]:
    """The refs of ``indices`` and their reads, started now where the source reads
    concurrently (remote storage), so a lane can overlap them with the batch before."""
    refs = [source.ref(i) for i in np.asarray(indices, dtype=np.int64).tolist()]
    return refs, read_many(source, refs)
