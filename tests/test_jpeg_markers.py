"""One walk over a JPEG's header markers (`_kernels/jpeg_markers.py`) serves the lossless check
before a scaled decode, the EXIF strip before torchcodec and the benchmarks' damage makers, and
it reads the header as libjpeg does: fill bytes and standalone markers (RSTn, TEM) between
segments are stepped over, not taken for a segment with a length."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import support.jpegs as fj
from support.bad_files import huge_header
from hybridload._kernels import turbo
from hybridload._kernels.dct_scale import ScaledDecode, scaled_size
from hybridload._kernels.decode import DecodeError, decode_image, image_size, is_lossless, jpeg_size
from hybridload._kernels.jpeg_markers import SOS, jpeg_segments
from hybridload.lanes._gpu.torch_decoders import without_exif

needs_turbo = pytest.mark.skipif(not turbo.available(), reason="the turbojpeg wheel is not installed")


def _after_soi(data: bytes, inserted: bytes) -> bytes:
    return data[:2] + inserted + data[2:]


def test_the_segments_tile_the_header_from_soi_to_the_end_of_sos():
    data = fj.pillow(fj.pixels(33, 47, 1), "420", True, True)
    segs = list(jpeg_segments(data))
    assert segs[0][1] == 2 and segs[-1][0] == SOS
    assert all(a[2] == b[1] for a, b in zip(segs, segs[1:]))  # no byte skipped, none read twice
    assert all(data[start] == 0xFF and data[start + 1] == marker for marker, start, _end in segs)
    assert {0xDB, 0xC2, 0xC4, 0xDD} <= {marker for marker, _start, _end in segs}  # DQT, SOF2, DHT, DRI


def test_fill_bytes_and_standalone_markers_are_stepped_over_as_libjpeg_does():
    data = fj.pillow(fj.pixels(16, 16, 2), "444", False, False)
    want = list(jpeg_segments(data))
    for inserted in (b"\xff", b"\xff\xff\xff"):  # fill bytes before the first marker
        got = list(jpeg_segments(_after_soi(data, inserted)))
        assert [(m, e - s) for m, s, e in got] == [(m, e - s) for m, s, e in want]
    got = list(jpeg_segments(_after_soi(data, b"\xff\xd0\xff\x01")))  # RST0 and TEM: no length field
    assert got[:2] == [(0xD0, 2, 4), (0x01, 4, 6)] and got[-1][0] == SOS
    assert list(jpeg_segments(b"\xff\xd8\xff\xd9\xff\xdb\x00\x04ab")) == [(0xD9, 2, 4)]  # EOI ends it
    assert list(jpeg_segments(b"\xff\xd8\xff\xdb\x00")) == []  # a length cut off by the end


@needs_turbo
@pytest.mark.parametrize("inserted", [b"\xff\xd0", b"\xff\x01", b"\xff\xff"], ids=["RST0", "TEM", "fill"])
def test_a_lossless_frame_after_a_standalone_marker_is_never_decoded_at_a_dct_scale(inserted):
    """libjpeg skips an RSTn or TEM marker between header segments, so such a lossless JPEG
    decodes; a walk that read a length after it missed the SOF3 and let the scaled decode write
    the full-size image into the scaled buffer (SIGSEGV at 1203x901, 1/8)."""
    data = _after_soi(fj.tj_compress(fj.pixels(64, 48, 1), {"quality": 90, "lossless": 1}), inserted)
    assert is_lossless(data)
    assert jpeg_size(data) is None and image_size(data) == (64, 48)
    with pytest.raises(DecodeError, match="lossless JPEG cannot be decoded at a DCT scale"):
        decode_image(data, ScaledDecode(2, 32, 24))
    assert decode_image(data).shape == (48, 64, 3)


def test_an_exif_segment_after_fill_bytes_is_removed_before_torchcodec():
    im, buf = Image.fromarray(fj.pixels(40, 24, 3)), io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90: torchcodec would apply it, the CPU lanes do not
    im.save(buf, "JPEG", quality=90, exif=exif.tobytes())
    at = buf.getvalue().index(b"\xff\xe1")
    data = buf.getvalue()[:at] + b"\xff\xff" + buf.getvalue()[at:]  # fill bytes before APP1
    plain = without_exif(data)
    assert b"Exif\x00\x00" in data and b"Exif\x00\x00" not in plain
    assert np.array_equal(decode_image(plain), decode_image(data))
    with Image.open(io.BytesIO(plain)) as got:
        assert got.getexif().get(0x0112) is None


@needs_turbo
def test_huge_header_rewrites_only_the_frame_size():
    data = fj.pillow(fj.pixels(16, 16, 4), "420", True, False)
    huge = huge_header(data, 65535)
    sof = next(start for marker, start, _end in jpeg_segments(data) if marker == 0xC2)
    assert huge[sof + 5 : sof + 9] == b"\xff\xff\xff\xff"
    assert huge[: sof + 5] == data[: sof + 5] and huge[sof + 9 :] == data[sof + 9 :]
    with pytest.raises(ValueError, match="no SOF0/SOF2 marker"):
        huge_header(fj.tj_compress(fj.pixels(8, 8, 1), {"quality": 90, "lossless": 1}))


@pytest.mark.parametrize("size", [(1, 1), (17, 33), (321, 241)])
def test_scaled_size_is_the_size_libjpeg_turbo_decodes_to(size):
    data = fj.pillow(fj.pixels(*size, 5), "420", False, False)
    for d in (2, 4, 8):
        w, h = scaled_size(*size, d)
        assert decode_image(data, ScaledDecode(d, w, h)).shape[:2] == (h, w)
        if turbo.available():
            assert turbo.decode_window(data, 0, 0, w, h, d)[0].shape[:2] == (h, w)
