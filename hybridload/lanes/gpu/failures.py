"""Which GPU-lane exceptions are a sample's problem and which are the lane's.

A per-sample decode problem (a payload that is not a JPEG, a JPEG without its end
marker, too many pixels, a read error, a decoder that refuses one image) is rerouted:
the batch goes to a CPU lane, which makes the exact pixels or the exact error naming the
sample, and the GPU lane is not blamed. Anything else (CUDA out of memory, a CUDA or
driver error, a bug) is a lane failure: it counts against the lane, so a lane that
cannot work stops being given batches instead of doing every batch twice.
"""

from __future__ import annotations

import contextlib
import re

import torch

from hybridload.errors import Reroute

# words of device-level trouble in torch, CUDA, nvJPEG and DALI messages
_DEVICE_TROUBLE = re.compile(
    r"out of memory|CUDA error|cuda runtime|cudaError|CUDA_ERROR|CUDA driver|allocation failed|"
    r"illegal memory access|device-side assert|NVJPEG_STATUS_(ALLOCATOR_FAILURE|EXECUTION_FAILED|INTERNAL_ERROR|"
    r"NOT_INITIALIZED|ARCH_MISMATCH)|cudaMalloc", re.IGNORECASE)
# words of a decoder refusing an image (DALI names its decoder operator; torchvision says "decode")
_DECODE_PROBLEM = re.compile(r"decoders?\.|decod|jpeg|bitstream|unsupported (image|format)|corrupt", re.IGNORECASE)


def is_device_failure(exc: BaseException) -> bool:
    """True when ``exc`` says the device itself is in trouble (out of memory, CUDA errors)."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return bool(_DEVICE_TROUBLE.search(str(exc)))


def is_sample_decode_problem(exc: BaseException) -> bool:
    """True when a decode step's exception is about an image, not about the device."""
    if is_device_failure(exc) or not isinstance(exc, (RuntimeError, ValueError)):
        return False
    return bool(_DECODE_PROBLEM.search(str(exc)))


def reroute_or_raise(exc: BaseException, what: str) -> None:
    """Raise :class:`Reroute` for a sample's decode problem; re-raise anything else as is."""
    if is_sample_decode_problem(exc):
        raise Reroute(f"{what}: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}") from None
    raise exc


@contextlib.contextmanager
def rerouting(what: str):
    """Around a decode step: a sample's decode problem leaves as :class:`Reroute`, anything
    else as it was raised (:func:`reroute_or_raise`)."""
    try:
        yield
    except Exception as exc:
        reroute_or_raise(exc, what)
