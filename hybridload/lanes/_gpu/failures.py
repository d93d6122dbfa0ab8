"""Which GPU-lane exceptions are a sample's problem (rerouted to a CPU lane, which names it) and
which the device's (counted against the lane, so a broken device stops getting batches), read from
the status codes and messages the decoders really produce (the table: docs/guide/concepts.md, "The
GPU lanes")."""

from __future__ import annotations

import contextlib
import re

import torch

from hybridload.lanes._base import Reroute

#: nvJPEG statuses about the image (nvjpeg.h); any other status is the device's.
NVJPEG_IMAGE_STATUSES = frozenset({3, 4, 9, 10})
#: nvJPEG statuses about the device, even in a step that reads one image's header.
NVJPEG_DEVICE_STATUSES = frozenset({1, 5, 6, 7, 8})
#: nvImageCodec statuses about the image (nvimgcodec.h); any other status is the device's.
NVIMGCODEC_IMAGE_STATUSES = frozenset({3, 4, 9, 13, 14, 18, 19})

IMAGE, DEVICE, OTHER = "image", "device", "other"

_HEADER_STEP = re.compile(r"Failed to (?:get image info|parse jpeg stream): (-?\d+)")
_DECODE_STEP = re.compile(r"(?:Failed to decode (?:batch|jpeg stream)|nvjpegDecode failed): (-?\d+)")
_DALI_NVJPEG = re.compile(r'NVJPEG error "(-?\d+)"', re.IGNORECASE)
_NVIMGCODEC = re.compile(r"nvImageCodec failure: '#(-?\d+)'")
# device-level trouble: torch and CUDA errors, and the decoders' set-up steps
_DEVICE_WORDS = re.compile(
    r"out of memory|CUDA error|cuda runtime|CUDA driver|cudaError|CUDA_ERROR|cudaMalloc|allocation failed|"
    r"illegal memory access|device-side assert|Failed to synchronize CUDA stream|"
    r"Failed to (?:initialize|create|attach|set output format|transfer jpeg)|nvjpegGetProperty failed|"
    r"not compiled with nvJPEG support|NVJPEG_STATUS_(?:NOT_INITIALIZED|ALLOCATOR_FAILURE|EXECUTION_FAILED|"
    r"ARCH_MISMATCH|INTERNAL_ERROR)",
    re.IGNORECASE,
)
# an image the decoder refuses (DALI names its decoder operator; torchvision says "decode")
_IMAGE_WORDS = re.compile(
    r"Failed to decode sample #|Unknown chroma subsampling|Expected a non empty 1-dimensional tensor|"
    r"must be 1-dimensional and non-empty|"
    r"decoders?\.|decod|jpeg|bitstream|unsupported (?:image|format)|corrupt",
    re.IGNORECASE,
)


def classify(exc: BaseException) -> str:
    """``"image"`` (a sample's decode problem), ``"device"`` (the device is in trouble) or
    ``"other"`` (anything else: a bug, which also counts against the lane)."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return DEVICE
    text = str(exc)
    verdicts = [IMAGE if int(s) not in NVJPEG_DEVICE_STATUSES else DEVICE for s in _HEADER_STEP.findall(text)]
    verdicts += [
        IMAGE if int(s) in NVJPEG_IMAGE_STATUSES else DEVICE
        for s in _DECODE_STEP.findall(text) + _DALI_NVJPEG.findall(text)
    ]
    verdicts += [IMAGE if int(s) in NVIMGCODEC_IMAGE_STATUSES else DEVICE for s in _NVIMGCODEC.findall(text)]
    if DEVICE in verdicts or _DEVICE_WORDS.search(text):
        return DEVICE
    if verdicts or _IMAGE_WORDS.search(text):
        return IMAGE
    return OTHER


def is_device_failure(exc: BaseException) -> bool:
    """True when ``exc`` says the device itself is in trouble (see `classify`)."""
    return classify(exc) == DEVICE


def is_sample_decode_problem(exc: BaseException) -> bool:
    """True when a decode step's exception is about an image, not about the device."""
    return isinstance(exc, (RuntimeError, ValueError)) and classify(exc) == IMAGE


def reroute_or_raise(exc: BaseException, what: str) -> None:
    """Raise `Reroute` for a sample's decode problem; re-raise anything else as is."""
    if is_sample_decode_problem(exc):
        raise Reroute(f"{what}: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}") from None
    raise exc


_AMBIGUOUS = re.compile(r"Failed to decode sample #(\d+)")


class DeviceDecodeFault(RuntimeError):
    """The GPU decoder failed a sample that the CPU kernels decode: the device's fault."""


def confirm_on_cpu(exc: BaseException, payloads, what: str, decode=None) -> None:
    """For nvImageCodec's causeless ``Failed to decode sample #k``: the CPU kernels decode the named
    sample (every one when none is named); `DeviceDecodeFault` when they decode it, `Reroute` when
    they cannot; anything else goes to `reroute_or_raise`."""
    found = _AMBIGUOUS.findall(str(exc))
    if not found or classify(exc) != IMAGE:
        reroute_or_raise(exc, what)
    if decode is None:
        from hybridload._kernels import decode_image as decode
    named = sorted({int(k) for k in found if int(k) < len(payloads)}) or list(range(len(payloads)))
    for k in named:
        try:
            decode(payloads[k])
        except Exception:
            raise Reroute(
                f"{what}: sample #{k} of the batch fails on the CPU too ({str(exc).splitlines()[0][:200]})"
            ) from None
    raise DeviceDecodeFault(
        f"{what}: the GPU decoder failed sample(s) {named} of the batch, which the CPU "
        f"decodes: a device fault ({str(exc).splitlines()[0][:200]})"
    ) from None


@contextlib.contextmanager
def rerouting(what: str):
    """Around a decode step: a sample's decode problem leaves as `Reroute`, anything
    else as it was raised (`reroute_or_raise`)."""
    try:
        yield
    except Exception as exc:
        reroute_or_raise(exc, what)
