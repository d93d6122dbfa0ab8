"""Helpers to generate bad inputs for the tests and the stress tools.

One place makes every kind of bad or unusual file the suite and ``tools/stress/reliability.py``
feed the lanes, so they all test the same inputs.
"""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path

import numpy as np
from PIL import Image

from hybridload._kernels.jpeg_markers import jpeg_segments

#: kinds that no lane can decode (the error names the sample and the stage)
UNDECODABLE = ("truncated", "zero", "text", "corrupt", "huge")
#: kinds that are not plain RGB JPEGs but decode all the same
DECODABLE = ("png", "gray", "cmyk", "gray16")
#: kinds that fail before decoding, when the file is read
UNREADABLE = ("missing", "locked")


def huge_header(jpeg: bytes, side: int = 20000) -> bytes:
    """``jpeg`` with its SOF0/SOF2 header rewritten to claim ``side`` x ``side`` pixels."""
    data = bytearray(jpeg)
    for marker, start, _end in jpeg_segments(data):
        if marker in (0xC0, 0xC2) and start + 9 <= len(data):
            data[start + 5 : start + 9] = struct.pack(">HH", side, side)
            return bytes(data)
    raise ValueError("no SOF0/SOF2 marker found: pass a baseline or progressive JPEG")


def _encoded(img: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


def make_bad_files(root: str | os.PathLike, good_jpeg_path: str | os.PathLike) -> dict[str, str]:
    """Write one file of each bad or unusual kind under ``root`` (created if missing), made from
    the good JPEG at ``good_jpeg_path``; returns {kind: path}, ``"good"`` included.

    Kinds: ``UNDECODABLE`` (truncated, empty, text, bytes overwritten mid-file, a header claiming
    20000 x 20000 pixels), ``DECODABLE`` (PNG, grayscale and CMYK JPEG, 16-bit grayscale PNG),
    ``UNREADABLE`` (a missing path, a file with no read permission)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    data = Path(good_jpeg_path).read_bytes()
    img = Image.open(io.BytesIO(data)).convert("RGB")
    corrupt = bytearray(data)
    mid = len(corrupt) // 2
    corrupt[mid : mid + 400] = np.random.default_rng(0).bytes(400)
    payloads = {
        "truncated.jpg": data[: len(data) // 3],
        "zero.jpg": b"",
        "text.jpg": b"this is not an image, just some text\n" * 20,
        "corrupt.jpg": bytes(corrupt),
        "huge.jpg": huge_header(data),
        "png.png": _encoded(img, "PNG"),
        "gray.jpg": _encoded(img.convert("L"), "JPEG"),
        "cmyk.jpg": _encoded(img.convert("CMYK"), "JPEG"),
        "gray16.png": _encoded(Image.fromarray(np.asarray(img.convert("L"), dtype=np.uint16) * 257), "PNG"),
        "locked.jpg": data,
    }
    files = {"good": str(good_jpeg_path)}
    for name, payload in payloads.items():
        path = root / name
        if path.exists():
            path.chmod(0o644)  # a second call over the same root rewrites the locked file too
        path.write_bytes(payload)
        files[name.split(".")[0]] = str(path)
    (root / "locked.jpg").chmod(0)
    files["missing"] = str(root / "does-not-exist.jpg")
    return files
