"""GPU lanes: the DALI engine and the torch engine, and building the first that runs.

`make_gpu_lane` tries the engines of ``LaneSpec.gpu_engines`` in order; that list is
decoded from ``LoaderPolicy.gpu_engine`` once, by `hybridload.policy.decode.gpu_engines`:

====================  ==========================================================
``gpu_engine``        GPU lane
====================  ==========================================================
"dali"                DALI on the loader's GPU; DALI's CPU-only mode on a CPU device
"torch"               nvJPEG decode (torchcodec's where installed, else torchvision's)
                      + torch ops on the loader's device
"auto"                DALI when it imports and builds on a GPU, else the torch engine
                      when torchvision decodes on that GPU, else none; with no GPU
                      visible, DALI's CPU-only mode where DALI imports (a stand-in,
                      with one loud warning per process), else none
====================  ==========================================================

A lane that cannot be had (engine missing, pipeline or decoder failing to start on the
device: driver or CUDA mismatch, nvJPEG initialisation, out of memory, a recipe outside
the engine's reach) gives ``None`` and one RuntimeWarning (once per process): the batches go
to the CPU lanes.

Modules: ``base`` (`GpuLane`, the skeleton both engines fill in), ``dali`` (the DALI engine),
``torch_lane`` (the torch engine) with ``torch_decoders`` (its JPEG decoder backends),
``torch_ops`` and ``torch_photo`` (the recipe's ops as torch functions), ``feed`` (what every
engine reads for a batch) and ``prep`` (where that host preparation runs), ``failures``
(which exceptions are a sample's problem and which the device's), ``ranges`` (the NVTX ranges
of a batch's read, decode and augment while a trace or torch's profiler records).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import asdict
from typing import TypedDict

import torch

from hybridload.errors import LaneUnavailableError
from hybridload.delivery.transfer import resolve_device

from hybridload.lanes import once
from hybridload.lanes.base import Lane
from hybridload.lanes.spec import LaneSpec

log = logging.getLogger(__name__)

__all__ = ["make_gpu_lane", "build_engine"]


#: how every GPU lane is built: uint8 out (delivery normalizes) and no host wait per batch
#: (delivery makes the consumer's stream wait on ``result.ready``); the GPU tests and the GPU
#: command build theirs through the lane spec, so with these flags too.
class LaneFlags(TypedDict):
    normalize_output: bool
    host_sync: bool


_LOADER_FLAGS: LaneFlags = {"normalize_output": False, "host_sync": False}


def _dali(spec: LaneSpec, source, recipe, *, batch_size, device) -> Lane:
    from hybridload.lanes.gpu.dali import DaliLane

    return DaliLane(
        source,
        recipe,
        batch_size=batch_size,
        device=device,
        **asdict(spec.options.gpu),
        **_LOADER_FLAGS,
    )


def _torch(spec: LaneSpec, source, recipe, *, batch_size, device) -> Lane:
    from hybridload.lanes.gpu.torch_decoders import gpu_decoder
    from hybridload.lanes.gpu.torch_lane import TorchGpuLane

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
    """The lane of one named engine, with the GPU knobs of ``spec`` (threads, memory budget);
    raises LaneUnavailableError / ValueError when it cannot run."""
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
