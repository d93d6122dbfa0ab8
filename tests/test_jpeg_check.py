"""The JPEG structure check every lane runs before decoding: it refuses each damaged kind with a
reason, and it never refuses a JPEG the CPU's strict decode accepts."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from hybridload._kernels import DecodeError, decode_image
from hybridload._kernels.jpeg_check import check_jpeg
from support.damaged import KINDS, damaged_jpegs, declare_size, photo_jpeg
from support.photos import photo_pixels

DAMAGED = damaged_jpegs()
REASONS = {
    "truncated": "no end-of-image marker",
    "header_only": "no image data",
    "zero_byte": "no image data",
    "oversized": "exceeds the limit",
    "declared_65500x1": "65500x1 frame needs at least 6141 bytes",
    "declared_65500x1_progressive": "65500x1 frame needs at least 3071 bytes",
    "declared_empty": "empty size 64x0",
}


def _refused_by_the_strict_decode(data: bytes) -> bool:
    try:
        decode_image(data)
    except DecodeError:
        return True
    return False


@pytest.mark.parametrize("kind", KINDS)
def test_each_damaged_kind_is_refused_with_its_reason_and_by_the_strict_decode_too(kind):
    with pytest.raises(DecodeError, match=REASONS[kind]):
        check_jpeg(DAMAGED[kind])
    assert _refused_by_the_strict_decode(DAMAGED[kind])


def _valid_jpegs() -> dict[str, bytes]:
    rgb = Image.fromarray(photo_pixels((203, 117), 3))
    out = {}
    for name, img, save in [
        ("444", rgb, {"subsampling": 0}),
        ("422", rgb, {"subsampling": 1}),
        ("420", rgb, {"subsampling": 2}),
        ("grey", rgb.convert("L"), {}),
        ("cmyk", rgb.convert("CMYK"), {}),
        ("progressive", rgb, {"progressive": True}),
        ("progressive-grey", rgb.convert("L"), {"progressive": True}),
        ("optimized", rgb, {"optimize": True, "quality": 20}),
        ("restarts", rgb, {"restart_marker_blocks": 3}),
        ("flat", Image.new("RGB", (640, 480), (9, 9, 9)), {"optimize": True, "quality": 5}),
        ("one-pixel", Image.new("RGB", (1, 1), (200, 10, 10)), {}),
        ("exif", rgb, {"exif": Image.Exif()}),
    ]:
        buf = io.BytesIO()
        img.save(buf, format="JPEG", **save)
        out[name] = buf.getvalue()
    good = out["420"]
    out["trailing-bytes"] = good + b"not part of the image" * 10
    out["fill-before-eoi"] = good[:-2] + b"\xff\xff\xff\xd9"
    return out


@pytest.mark.parametrize("name", list(_valid_jpegs()))
def test_a_jpeg_the_strict_decode_accepts_passes_the_check(name):
    data = _valid_jpegs()[name]
    assert not _refused_by_the_strict_decode(data)
    check_jpeg(data)


def test_the_check_refuses_nothing_the_strict_decode_accepts_over_mutated_jpegs():
    """Soundness over 600 seeded mutants (cut, a byte changed in the header, in the scan or at the
    end, a frame size redeclared): every one the check refuses, the CPU decode refuses too."""
    rng = np.random.default_rng(44)
    bases = [photo_jpeg((64, 48)), photo_jpeg((40, 72), progressive=True), photo_jpeg((33, 17), subsampling=0)]
    refused = 0
    for k in range(600):
        data = bytearray(bases[k % len(bases)])
        how = k % 5
        if how == 0:
            data = data[: int(rng.integers(1, len(data)))]
        elif how in (1, 2):
            at = int(rng.integers(2, 700 if how == 1 else len(data)) % len(data))
            data[at] = int(rng.integers(0, 256))
        elif how == 3:
            data = data[:-2] + bytes(rng.integers(0, 256, int(rng.integers(1, 6)), dtype=np.uint8))
        else:
            data = bytearray(declare_size(bytes(data), int(rng.integers(1, 3000)), int(rng.integers(1, 3000))))
        try:
            check_jpeg(bytes(data))
        except DecodeError as exc:
            refused += 1
            assert _refused_by_the_strict_decode(bytes(data)), f"mutant {k} refused by the check only: {exc}"
    assert refused > 100  # the mutants reach the check's refusals, not only its acceptances
