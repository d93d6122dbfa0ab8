"""Which GPU-lane exceptions are a sample's problem and which are the device's.

A per-sample decode problem (a payload that is not a JPEG, a JPEG without its end marker
or failing the structure check (`kernels.jpeg_check`), too many pixels, a bitstream the
decoder refuses) is rerouted: the batch goes to a CPU lane,
which makes the exact pixels or the exact error naming the sample, and the GPU lane is not
blamed. A device fault (CUDA out of memory, a CUDA or driver error, nvJPEG failing to
allocate, initialise or execute) is a lane failure: it counts against the lane, so a broken
device stops being given batches instead of rerouting every batch for ever.

The decision reads the status codes and messages the decoders really produce:

* torchvision's batched CUDA decoder (``torchvision/csrc/io/image/cuda/decode_jpegs_cuda.cpp``)
  says ``"Failed to <step>: <status>"``; the status is an ``nvjpegStatus_t`` (``nvjpeg.h``:
  3 BAD_JPEG, 4 JPEG_NOT_SUPPORTED, 9 IMPLEMENTATION_NOT_SUPPORTED and 10 INCOMPLETE_BITSTREAM
  are about the image; 1 NOT_INITIALIZED, 5 ALLOCATOR_FAILURE, 6 EXECUTION_FAILED,
  7 ARCH_MISMATCH and 8 INTERNAL_ERROR about the device) or, for ``"Failed to synchronize CUDA
  stream"``, a ``cudaError_t`` (always the device). Steps that read one image's header
  (``"Failed to get image info"``, ``"Failed to parse jpeg stream"``) are the image's unless
  the status is a device status; steps that set the decoder up (``"Failed to initialize ..."``,
  ``"Failed to create ..."``, ``"Failed to attach ..."``) are the device's.
* torchcodec's batched CUDA decoder (``src/torchcodec/_core/DecodeJpegCuda.cpp``) says the
  same ``"Failed to <step>: <status>"`` for the same nvJPEG steps, plus ``"nvjpegDecode failed:
  <status>"`` from its per-image software path (progressive JPEGs, GPUs without the hardware
  engine), and ``"Input tensor must be 1-dimensional and non-empty"`` (``ImageCommon.h``) for
  an empty payload.
* DALI's nvJPEG decoder (``dali/operators/decoder/nvjpeg/nvjpeg_helper.h``) says
  ``NVJPEG error "<status>"``; its nvImageCodec decoders say ``nvImageCodec failure: '#<status>'``
  (``nvimgcodecStatus_t``, ``nvimgcodec.h``: 3 BAD_CODESTREAM, 4 CODESTREAM_UNSUPPORTED,
  9 IMPLEMENTATION_UNSUPPORTED, 13, 14, 18 and 19 (the extension's bad, unsupported or
  incomplete code stream) are the image's; the rest, allocation, execution, internal and CUDA
  call failures, the device's) or ``Failed to decode sample #<k>``, whatever the cause: a bad
  image and a device fault read the same. `confirm_on_cpu` settles it: the named sample
  (every sample when none is named) is decoded by the CPU kernels; one they decode was the
  device's fault, which counts against the lane (two in a row break it).
"""

from __future__ import annotations

import contextlib
import re

import torch

from hybridload.lanes.base import Reroute

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
    """For nvImageCodec's causeless ``Failed to decode sample #k``: decode the named sample (every
    sample when none is named) with the CPU kernels. Raise `DeviceDecodeFault` (a lane
    failure) when they decode it, `Reroute` when they cannot (the CPU lane then names the
    sample); any other exception goes to `reroute_or_raise`."""
    found = _AMBIGUOUS.findall(str(exc))
    if not found or classify(exc) != IMAGE:
        reroute_or_raise(exc, what)
    if decode is None:
        from hybridload.kernels import decode_image as decode
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
