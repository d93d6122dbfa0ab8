"""Damaged JPEGs made from a good one, each kind a way a file goes wrong that every lane must
answer alike (the all-lanes test in tests/test_bad_data.py, the structure check's own tests)."""

from __future__ import annotations

import io
import struct

from PIL import Image

from hybridload._kernels.jpeg_markers import SOS, jpeg_segments
from support.photos import photo_pixels

#: Every kind `damaged_jpegs` makes; each one libjpeg-turbo's strict decode refuses.
KINDS = (
    "truncated",
    "header_only",
    "zero_byte",
    "oversized",
    "declared_65500x1",
    "declared_65500x1_progressive",
    "declared_empty",
)


def photo_jpeg(size: tuple[int, int] = (64, 48), seed: int = 7, **save) -> bytes:
    """A photo-like JPEG of ``size`` (width, height); ``save``: Pillow's JPEG options."""
    buf = io.BytesIO()
    Image.fromarray(photo_pixels(size, seed)).save(buf, format="JPEG", quality=90, **save)
    return buf.getvalue()


def declare_size(jpeg: bytes, width: int, height: int) -> bytes:
    """``jpeg`` with its frame header (SOF0/1/2) saying ``width`` x ``height``, its data unchanged."""
    data = bytearray(jpeg)
    for marker, start, _end in jpeg_segments(data):
        if marker in (0xC0, 0xC1, 0xC2):
            data[start + 5 : start + 9] = struct.pack(">HH", height, width)
            return bytes(data)
    raise ValueError("no SOF0/SOF1/SOF2 frame header: pass a baseline or progressive JPEG")


def header_only(jpeg: bytes) -> bytes:
    """``jpeg``'s marker segments up to (not including) its first scan: tables, no image data."""
    for marker, start, _end in jpeg_segments(jpeg):
        if marker == SOS:
            return jpeg[:start]
    raise ValueError("no scan (SOS) in the JPEG")


def damaged_jpegs(seed: int = 7) -> dict[str, bytes]:
    """{kind: bytes} for every kind of `KINDS`, made from 64x48 photo JPEGs (the 65500x1 kinds:
    a frame header declaring 65500x1 over a scan that holds the 64x48 image)."""
    good, progressive = photo_jpeg(seed=seed), photo_jpeg(seed=seed, progressive=True)
    return {
        "truncated": good[: len(good) * 2 // 3],
        "header_only": header_only(good),
        "zero_byte": b"",
        "oversized": declare_size(good, 20000, 20000),
        "declared_65500x1": declare_size(good, 65500, 1),
        "declared_65500x1_progressive": declare_size(progressive, 65500, 1),
        "declared_empty": declare_size(good, 64, 0),
    }
