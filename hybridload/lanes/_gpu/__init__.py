"""GPU lanes: the DALI and torch engines, and `make_gpu_lane`, which builds the first of
``LaneSpec.gpu_engines`` that runs (the choice by ``gpu_engine``: docs/guide/concepts.md); one that
cannot be had gives None and one warning a process, and its batches go to the CPU lanes.

Modules: ``base`` (`GpuLane`, the skeleton both engines fill in), ``dali`` (the DALI engine),
``torch_lane`` (the torch engine) with ``torch_decoders`` (its JPEG decoders), ``feed`` (what every
engine reads for a batch), ``prep`` (where that host preparation runs), ``failures`` (a sample's
problem or the device's) and ``ranges`` (NVTX ranges while a trace or the profiler records)."""

from __future__ import annotations

import logging
import warnings
from dataclasses import asdict
from typing import TypedDict

import torch

from hybridload.errors import LaneUnavailableError
from hybridload.delivery._transfer import resolve_device

from hybridload.lanes import _once as once
from hybridload.lanes._base import Lane
from hybridload.lanes._spec import LaneSpec

log = logging.getLogger(__name__)

__all__ = ["make_gpu_lane", "build_engine"]


#: how every GPU lane is built: uint8 out and no host wait per batch (delivery waits on
#: ``result.ready``); the GPU tests build theirs through the lane spec, so with these flags too
class LaneFlags(TypedDict):
    normalize_output: bool
    host_sync: bool


_LOADER_FLAGS: LaneFlags = {"normalize_output": False, "host_sync": False}


def _dali(spec: LaneSpec, source, recipe, *, batch_size, device) -> Lane:
    from hybridload.lanes._gpu.dali import DaliLane

    return DaliLane(
        source,
        recipe,
        batch_size=batch_size,
        device=device,
        **asdict(spec.options.gpu),
        **_LOADER_FLAGS,
    )


def _torch(spec: LaneSpec, source, recipe, *, batch_size, device) -> Lane:
    from hybridload.lanes._gpu.torch_decoders import gpu_decoder
    from hybridload.lanes._gpu.torch_lane import TorchGpuLane

    decode = gpu_decoder(device)  # torchcodec's, else torchvision's; LaneUnavailableError when neither decodes
    return TorchGpuLane(
        source,
        recipe,
        batch_size=batch_size,
        device=device,
        decode=decode,
        **asdict(spec.options.gpu),
        **_LOADER_FLAGS,
    )


ENGINES = {"dali": _dali, "torch": _torch}


def build_engine(engine: str, spec: LaneSpec, source, recipe, *, batch_size: int, device: torch.device) -> Lane:
    """The lane of one named engine with ``spec``'s GPU knobs; LaneUnavailableError or ValueError
    when it cannot run."""
    if not recipe.gpu_capable:
        raise LaneUnavailableError("the recipe holds a CustomStage, which runs on CPU lanes only")
    return ENGINES[engine](spec, source, recipe, batch_size=batch_size, device=device)


def make_gpu_lane(spec: LaneSpec, source, recipe, *, batch_size: int, device: str | torch.device | None) -> Lane | None:
    """The first of ``spec.gpu_engines`` that builds, or None (with one RuntimeWarning) when none can run."""
    device = resolve_device(device)
    reasons = [spec.gpu_engines_note] if spec.gpu_engines_note else []
    for name in spec.gpu_engines:
        try:
            return build_engine(name, spec, source, recipe, batch_size=batch_size, device=device)
        except (LaneUnavailableError, ValueError) as exc:
            reasons.append(f"{name}: {exc}")
            log.info("GPU engine %s unavailable: %s", name, exc)
    if not spec.gpu_engines:  # nothing here could run it (no CUDA device, no DALI): said in one short line
        msg = f"hybridload: no GPU lane ({spec.gpu_engines_note}): its batches go to the CPU lanes (mode='cpu' silences this)"
    else:
        msg = f"hybridload: the GPU lane is unavailable ({'; '.join(reasons)}); its batches go to the CPU lanes"
    if once.first_time(msg):
        warnings.warn(msg, RuntimeWarning, stacklevel=5)
    return None
