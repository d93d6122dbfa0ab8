"""Decoding: encoded bytes (or an already decoded image) to an RGB HWC uint8 array."""

from __future__ import annotations

import io
import re
import warnings
from typing import Any, NamedTuple

import numpy as np
from PIL import Image

from hybridload._kernels import turbo
from hybridload._kernels.dct_scale import ScaledDecode
from hybridload._kernels.jpeg_markers import jpeg_segments
from hybridload._kernels.pixel_limit import MAX_IMAGE_PIXELS

try:  # libjpeg-turbo through simplejpeg: ~1.8x Pillow's JPEG decode, bit-identical output
    import simplejpeg
except ImportError:  # pragma: no cover - simplejpeg is a dependency; Pillow still works
    simplejpeg = None


class DecodeError(ValueError):
    """The payload is not a decodable image; the message says why."""


def is_jpeg(data) -> bool:
    """True for bytes that start with a JPEG SOI marker."""
    return isinstance(data, (bytes, bytearray)) and data[:3] == b"\xff\xd8\xff" and len(data) > 3


def check_pixels(w: int, h: int) -> None:
    """Refuse an empty image or one over `MAX_IMAGE_PIXELS` (`DecodeError`): every lane's one size check."""
    if w <= 0 or h <= 0:
        raise DecodeError(f"image has an empty size {w}x{h}")
    if w * h > MAX_IMAGE_PIXELS:
        raise DecodeError(f"image of {w}x{h} pixels exceeds the limit of {MAX_IMAGE_PIXELS} pixels")


def image_size(payload: Any) -> tuple[int, int]:
    """(width, height) of an image, from its header only (no full decode)."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        data = bytes(payload)
        if not data:
            raise DecodeError("zero-byte file")
        if simplejpeg is not None and is_jpeg(data):
            try:
                header = _jpeg_header(data)
            except DecodeError:
                header = None  # let Pillow have a go (and produce the error message)
            if header is not None:
                return header.width, header.height
        try:
            with Image.open(io.BytesIO(data)) as im:
                return im.size
        except Exception as exc:
            raise DecodeError(f"not a readable image ({_reason(exc)})") from None
    arr = _decoded_array(payload)
    return arr.shape[1], arr.shape[0]


def _decoded_array(payload: Any) -> np.ndarray:
    if isinstance(payload, Image.Image):
        return _pil_to_rgb(payload)
    if isinstance(payload, np.ndarray):
        arr = payload
    elif hasattr(payload, "numpy") and hasattr(payload, "dim"):  # a torch tensor, CHW
        t = payload.detach().cpu()
        if t.dim() == 3 and t.shape[0] in (1, 3):
            t = t.permute(1, 2, 0)
        arr = t.numpy()
    else:
        raise DecodeError(
            f"unsupported payload type {type(payload).__name__}; give bytes, a PIL image, "
            "an HWC uint8 array or a CHW uint8 tensor"
        )
    if arr.dtype != np.uint8:
        raise DecodeError(f"decoded images must be uint8, got {arr.dtype}")
    if arr.ndim == 2:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    if arr.ndim != 3 or arr.shape[2] not in (1, 3, 4):
        raise DecodeError(f"decoded images must be HxW, HxWx1, HxWx3 or HxWx4, got shape {arr.shape}")
    if arr.shape[2] == 1:
        arr = np.repeat(arr, 3, axis=2)
    elif arr.shape[2] == 4:
        arr = arr[:, :, :3]
    return arr


def _pil_to_rgb(im: Image.Image) -> np.ndarray:
    check_pixels(*im.size)
    if im.mode == "I;16" or im.mode.startswith("I;16") or im.mode == "I":
        # 16-bit grayscale: scale to 8 bits rather than letting convert() clip
        a: np.ndarray = np.asarray(im, dtype=np.uint32 if im.mode == "I" else np.uint16)
        a = (a >> 8).astype(np.uint8) if a.dtype == np.uint16 else np.clip(a >> 8, 0, 255).astype(np.uint8)
        return np.repeat(a[:, :, None], 3, axis=2)
    if im.mode != "RGB":
        im = im.convert("RGB")
    return np.asarray(im)


class _Header(NamedTuple):
    width: int
    height: int
    colorspace: str


def _jpeg_header(data: bytes | bytearray) -> _Header | None:
    """A JPEG's size and colour space from simplejpeg's header reader; None for a subsampling
    simplejpeg 1.9 cannot name (4:4:1: a KeyError there), which Pillow decodes. Raises
    `DecodeError` for a header that does not parse."""
    try:
        h, w, colorspace, _sub = simplejpeg.decode_jpeg_header(data)
    except ValueError as exc:
        raise DecodeError(f"corrupt JPEG header ({exc})") from None
    except KeyError:
        return None
    return _Header(int(w), int(h), colorspace)


#: The colour spaces libjpeg-turbo decodes to RGB itself (and can scale in the DCT domain).
_TURBO_COLORSPACES = ("Gray", "YCbCr", "RGB")


def jpeg_size(payload: Any) -> tuple[int, int] | None:
    """(width, height) from the header of a JPEG libjpeg-turbo decodes to RGB and can DCT-scale;
    None for anything else, the decode then saying why. Read by the crop window's library where
    it loaded, which keeps the header for the window's decode (one header read a sample, a third
    of the ~17 us simplejpeg's reader and the lossless check took); else by simplejpeg."""
    if not isinstance(payload, (bytes, bytearray)) or not is_jpeg(payload):
        return None
    if turbo.available():
        try:
            return turbo.jpeg_size(bytes(payload))
        except turbo.TurboError:
            return None
    return _simplejpeg_size(payload)


def jpeg_header(payload: Any) -> tuple[tuple[int, int] | None, turbo.Handle | None]:
    """`jpeg_size` and, where libjpeg-turbo 3 read it, the decompressor that keeps the header for
    the window's decode of ``bytes(payload)`` (`turbo.read_header`: each sample of a group its
    own, where this thread's one handle would read each header twice), else None."""
    if not is_jpeg(payload):
        return None, None
    if turbo.available():
        try:
            return turbo.read_header(bytes(payload))
        except turbo.TurboError:
            return None, None
    return _simplejpeg_size(payload), None


def _simplejpeg_size(payload: bytes | bytearray) -> tuple[int, int] | None:
    if simplejpeg is None:
        return None
    try:
        header = _jpeg_header(payload)
    except DecodeError:
        return None
    if header is None or header.colorspace not in _TURBO_COLORSPACES or is_lossless(payload):
        return None
    return header.width, header.height


#: Start-of-frame markers: those of lossless JPEGs (no DCT: nothing to scale) and the rest.
_SOF_LOSSLESS = frozenset((0xC3, 0xC7, 0xCB, 0xCF))
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def is_lossless(data: bytes | bytearray) -> bool:
    """True for a lossless JPEG (SOF3/7/11/15), which must never be scaled: simplejpeg 1.9 would
    size the output scaled and libjpeg-turbo write it full size (a heap overflow)."""
    for marker, _start, _end in jpeg_segments(data):
        if marker in _SOF:
            return marker in _SOF_LOSSLESS
    return False


def decode_image(payload: Any, scaled: ScaledDecode | None = None) -> np.ndarray:
    """Decode to an RGB HWC uint8 array. Raises `DecodeError` with a reason.

    ``scaled``: decode a JPEG at 1/denominator of its size in the DCT domain (see
    `dct_scale`); the pixel limit is checked on the full size first."""
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        return _decoded_array(payload)
    data = bytes(payload)
    if not data:
        raise DecodeError("zero-byte file")
    if simplejpeg is not None and is_jpeg(data):
        header = _jpeg_header(data)  # None: 4:4:1, which Pillow decodes, checking its size first
        if header is not None:
            check_pixels(header.width, header.height)
        if scaled is not None and is_lossless(data):
            raise DecodeError("a lossless JPEG cannot be decoded at a DCT scale: decode it in full")
        colorspace = None if header is None else header.colorspace
        if colorspace in _TURBO_COLORSPACES:
            size = {} if scaled is None else {"min_width": scaled.min_width, "min_height": scaled.min_height}
            try:
                return simplejpeg.decode_jpeg(data, colorspace="RGB", strict=True, **size)
            except ValueError as exc:
                raise DecodeError(f"corrupt or truncated JPEG ({exc})") from None
        if scaled is not None:  # Pillow's decode below would come back at full size
            raise DecodeError(f"a {colorspace or '4:4:1'} JPEG cannot be decoded at a DCT scale: decode it in full")
        # CMYK / YCCK and other colour spaces: Pillow converts them
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as im:
                check_pixels(*im.size)
                im.load()
                return _pil_to_rgb(im)
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError(f"not a decodable image ({_reason(exc)})") from None


def _reason(exc: Exception) -> str:
    """The exception in words, without Pillow's ``<_io.BytesIO object at 0x...>`` (the
    SampleError around it names the sample's index and path)."""
    text = re.sub(r"\s*<_io\.BytesIO object at 0x[0-9a-fA-F]+>", "", str(exc))
    if isinstance(exc, Image.UnidentifiedImageError):
        text = "Pillow recognises no image format in these bytes"
    return f"{type(exc).__name__}: {text}"
