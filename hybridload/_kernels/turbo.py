"""Decode only a window of a JPEG: TurboJPEG 3's cropping region and DCT scale through ctypes on
the ``turbojpeg`` wheel's bundled library (no compiler, no system library); without it
`available` is False and the full decode runs (why this route: docs/decisions/crop-window-turbojpeg.md,
docs/decisions/crop-decoder-wheel.md)."""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import threading

import numpy as np

from hybridload._kernels import dct_scale
from hybridload._kernels.pixel_limit import MAX_IMAGE_PIXELS

# turbojpeg.h (TurboJPEG 3): enum values
_TJINIT_DECOMPRESS = 1
_TJPARAM_STOPONWARNING, _TJPARAM_SUBSAMP, _TJPARAM_JPEGWIDTH, _TJPARAM_JPEGHEIGHT = 0, 4, 5, 6
_TJPARAM_PRECISION, _TJPARAM_COLORSPACE, _TJPARAM_LOSSLESS = 7, 8, 15
_TJPF_RGB = 0
#: iMCU width per TJSAMP (444, 422, 420, GRAY, 440, 411): the left edge of a window sits on one.
_MCU_WIDTH = (8, 16, 16, 8, 8, 32)
#: TJCS values the decode turns into RGB as the full decode does (RGB, YCbCr, grey).
_RGB_COLORSPACES = (0, 1, 2)
#: The scale denominators a window is decoded at (1/1, and libjpeg-turbo's SIMD IDCT sizes).
DENOMINATORS = (1, *sorted(dct_scale.DENOMINATORS))


class TurboError(ValueError):
    """libjpeg-turbo refused the JPEG (corrupt, truncated, a warning under strict decoding)."""


class _Region(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int), ("y", ctypes.c_int), ("w", ctypes.c_int), ("h", ctypes.c_int)]


class _Scale(ctypes.Structure):
    _fields_ = [("num", ctypes.c_int), ("denom", ctypes.c_int)]


def _library_path() -> str | None:
    spec = importlib.util.find_spec("turbojpeg")
    if spec is None or not spec.origin:
        return None
    found = sorted(glob.glob(os.path.join(os.path.dirname(spec.origin), "turbojpeg.libs", "libturbojpeg*.so*")))
    return found[0] if found else None


def _load():
    path = _library_path()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
        fns = (lib.tj3Init, lib.tj3SetCroppingRegion, lib.tj3SetScalingFactor, lib.tj3Decompress8)
    except (OSError, AttributeError):  # not a libjpeg-turbo 3: keep the full decode
        return None
    fns[0].restype = ctypes.c_void_p
    fns[0].argtypes = [ctypes.c_int]
    lib.tj3Destroy.argtypes = [ctypes.c_void_p]
    lib.tj3Set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.tj3Get.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.tj3GetErrorStr.argtypes = [ctypes.c_void_p]
    lib.tj3GetErrorStr.restype = ctypes.c_char_p
    lib.tj3DecompressHeader.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.tj3SetCroppingRegion.argtypes = [ctypes.c_void_p, _Region]
    lib.tj3SetScalingFactor.argtypes = [ctypes.c_void_p, _Scale]
    lib.tj3Decompress8.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int,
    ]
    return lib


_LIB = _load()
_local = threading.local()


def available() -> bool:
    """True where libjpeg-turbo 3 loaded (the ``turbojpeg`` wheel is installed)."""
    return _LIB is not None


class Handle:
    """A TurboJPEG decompressor for one JPEG, ``data``, and what `_read_header` made of its header
    (``info``); destroyed when its thread takes up the next JPEG, or with the thread."""

    def __init__(self):
        self.ptr = _LIB.tj3Init(_TJINIT_DECOMPRESS)
        if not self.ptr:
            raise MemoryError("tj3Init failed")
        _LIB.tj3Set(self.ptr, _TJPARAM_STOPONWARNING, 1)  # strict, as the full decode (simplejpeg strict=True)
        self.data: bytes | None = None
        self.info: tuple[int, int, int, int] | None = None

    def __del__(self):
        if self.ptr and _LIB is not None:
            _LIB.tj3Destroy(self.ptr)


def _decompressor(data: bytes) -> Handle:
    """This thread's decompressor for ``data`` (a TurboJPEG handle is not thread-safe): the one
    that read its header, else a new one (~2 us). Never one that read another JPEG: libjpeg-turbo
    keeps the last JPEG's quantization and Huffman tables and decodes a JPEG that lacks its own
    with them, where a fresh one refuses it (or takes the standard Huffman codes), as the full
    decode does."""
    h = getattr(_local, "handle", None)
    if h is None or h.data is not data:
        h = _local.handle = Handle()
    return h


def _fail(h: Handle, what: str) -> TurboError:
    """The error for a failed call; the handle is dropped (this thread's, or marked read for no
    JPEG), since one that failed mid-read refuses every later JPEG ("two SOI markers")."""
    err = TurboError(f"{what} ({_LIB.tj3GetErrorStr(h.ptr).decode(errors='replace')})")
    h.data = h.info = None
    if getattr(_local, "handle", None) is h:
        _local.handle = None  # its __del__ destroys it
    return err


def _read_header(h: Handle, data: bytes) -> tuple[int, int, int, int] | None:
    """(width, height, subsampling, bits per sample) of ``data`` read into ``h``, or None for a
    JPEG libjpeg-turbo does not decode to RGB at a scale (lossless, an unusual subsampling, CMYK
    or YCCK). A header ``h`` read last is not read again: a sample's header is read once, for
    its size and its window, and ``tj3Decompress8`` reads it again itself."""
    if h.data is data:
        return h.info
    t = h.ptr
    if _LIB.tj3DecompressHeader(t, data, len(data)) != 0:
        raise _fail(h, "corrupt JPEG header")
    sub = _LIB.tj3Get(t, _TJPARAM_SUBSAMP)
    info = None
    if (
        0 <= sub < 6
        and _LIB.tj3Get(t, _TJPARAM_LOSSLESS) != 1
        and _LIB.tj3Get(t, _TJPARAM_COLORSPACE) in _RGB_COLORSPACES
    ):
        width, height = _LIB.tj3Get(t, _TJPARAM_JPEGWIDTH), _LIB.tj3Get(t, _TJPARAM_JPEGHEIGHT)
        info = width, height, sub, _LIB.tj3Get(t, _TJPARAM_PRECISION)
    h.data, h.info = data, info
    return info


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a JPEG libjpeg-turbo decodes to RGB and can DCT-scale (lossy, RGB, YCbCr
    or grey, 4:4:4 to 4:1:1 or grey subsampling: what simplejpeg's header reader and the lossless
    check accept), None for any other; raises `TurboError` for a header the library refuses. Its
    header stays read for `decode_window` of the same ``data`` object on this thread."""
    info = _read_header(_decompressor(data), data)
    return None if info is None else (info[0], info[1])


def read_header(data: bytes) -> tuple[tuple[int, int] | None, Handle]:
    """`jpeg_size` of ``data`` and a decompressor of its own that keeps the header read, for
    `decode_window` of the same ``data`` object on this thread: a batch job reads a group's
    headers before their decodes, which this thread's one handle would read each again (a
    third of the ~6 us header step). Raises `TurboError` as `jpeg_size`."""
    h = Handle()
    info = _read_header(h, data)
    return (None if info is None else (info[0], info[1])), h


def decode_window(
    data: bytes,
    x: int,
    y: int,
    w: int,
    h: int,
    denominator: int = 1,
    margin: int = 0,
    handle: Handle | None = None,
) -> tuple[np.ndarray, int, int] | None:
    """(RGB HWC uint8 pixels, dx, dy) of the window (x, y, w, h) at 1/``denominator``, widened by
    ``margin`` and on the left to the iMCU's edge, its corner at (dx, dy); None where the full
    decode must run. Raises `TurboError` for corrupt data, ValueError for an impossible window;
    everything the library is given is checked here first. ``handle``: `read_header`'s for
    ``data`` (this thread's is used where it read another or failed)."""
    if denominator not in DENOMINATORS:
        raise ValueError(f"denominator must be one of {DENOMINATORS}, got {denominator!r}")
    if min(x, y, margin) < 0 or w < 1 or h < 1:
        raise ValueError(f"window ({x}, {y}, {w}, {h}) with margin {margin}: x, y, margin >= 0 and w, h >= 1")
    if handle is None or handle.data is not data:
        handle = _decompressor(data)
    info = _read_header(handle, data)
    if info is None:
        return None
    width, height, sub, bits = info
    if bits != 8 or not 0 < width * height <= MAX_IMAGE_PIXELS:
        return None
    t = handle.ptr
    d = denominator
    sw, sh = dct_scale.scaled_size(width, height, d)  # what tj3Decompress8 decodes to
    if x + w > sw or y + h > sh:
        return None
    mcu = -(-_MCU_WIDTH[sub] // d)
    x0 = max(x - margin, 0) // mcu * mcu
    y0 = max(y - margin, 0)
    x1, y1 = min(sw, x + w + margin), min(sh, y + h + margin)
    if _LIB.tj3SetScalingFactor(t, _Scale(1, d)) != 0:
        raise _fail(handle, f"scale 1/{d}")
    if _LIB.tj3SetCroppingRegion(t, _Region(x0, y0, x1 - x0, y1 - y0)) != 0:
        raise _fail(handle, f"window {x1 - x0}x{y1 - y0} at ({x0}, {y0})")
    out = np.empty((y1 - y0, x1 - x0, 3), dtype=np.uint8)
    if _LIB.tj3Decompress8(t, data, len(data), out.ctypes.data, (x1 - x0) * 3, _TJPF_RGB) != 0:
        raise _fail(handle, "corrupt or truncated JPEG")
    return out, x - x0, y - y0
