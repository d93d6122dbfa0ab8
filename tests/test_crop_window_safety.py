"""The crop-window decode never crashes the process, never leaves its thread's decoder broken
and refuses, before libjpeg-turbo sees them, windows and scales no JPEG takes.
`tools/fuzz/fuzz_decode_window.py` finds such cases; its fixed nastiest ones run here in a
child process, so that a crash is a signal the test sees rather than the end of pytest."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import support.jpegs as fj
from hybridload._kernels import crop_window, turbo
from hybridload._kernels.dct_scale import ScaledDecode
from hybridload._kernels.decode import decode_image
from hybridload._kernels.jpeg_markers import jpeg_segments
from hybridload.recipe._ops import Crop, Resize

pytestmark = pytest.mark.skipif(not turbo.available(), reason="the turbojpeg wheel is not installed")
TESTS = Path(__file__).resolve().parent
FUZZ = TESTS.parent / "tools" / "fuzz"


def _bogus_sampling(data: bytes) -> bytes:
    """``data`` with its first component's sampling factors made 2x10 (libjpeg-turbo: "Bogus
    sampling factors", raised while reading the header)."""
    out = bytearray(data)
    sof = next(s for m, s, _e in jpeg_segments(data) if m == 0xC0)
    out[sof + 11] = 0x2A
    return bytes(out)


def test_a_window_decode_that_failed_leaves_the_next_jpeg_decodable():
    good = fj.pillow(fj.pixels(203, 101, 3), "420", False, False)
    bad = _bogus_sampling(fj.pillow(fj.pixels(8, 8, 5), "gray", False, False))
    for _ in range(2):
        with pytest.raises(turbo.TurboError, match="Bogus sampling factors"):
            turbo.decode_window(bad, 0, 0, 8, 8)
        arr, dx, dy = turbo.decode_window(good, 40, 30, 50, 20, 1, 2)
        assert np.array_equal(arr[dy : dy + 20, dx : dx + 50], decode_image(good)[30:50, 40:90])


def test_a_lossless_jpeg_is_never_decoded_at_a_dct_scale(zygote):
    """simplejpeg sizes a scaled decode's output for the scale, and libjpeg-turbo writes a
    lossless JPEG at full size into it: a heap overflow (SIGABRT or SIGSEGV) if the scale were
    used. In a child process (the session's zygote), so that a crash fails this test only."""
    code = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import torch
import support.jpegs as fj
from hybridload import recipe
from hybridload._kernels.batch import process_payload
from hybridload.sources import SampleRef
data = fj.tj_compress(fj.pixels(1203, 901, 1), {{"quality": 90, "lossless": 1}})
def run(i, **dec):
    rec = recipe.Recipe([recipe.Decode(**dec), recipe.RandomResizedCrop(7), recipe.HorizontalFlip()])
    return process_payload(SampleRef(i, "lossless.jpg", 0), data, rec, 0, 0)
for i in range(4):
    for gap in (1.0, 2.0):
        for window in (True, False):
            got = run(i, dct_scaling=True, reducing_gap=gap, crop_window=window)
            assert torch.equal(got, run(i, crop_window=False)), (i, gap, window)
print("same pixels as the full decode")
"""
    proc = zygote.run(code=code, cwd=Path.cwd(), env=dict(os.environ), timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "same pixels as the full decode" in proc.stdout


def test_a_scaled_decode_of_a_lossless_jpeg_is_refused_by_name():
    from hybridload._kernels.decode import DecodeError, is_lossless, jpeg_size

    lossless = fj.tj_compress(fj.pixels(64, 48, 1), {"quality": 90, "lossless": 1})
    plain = fj.pillow(fj.pixels(64, 48, 1), "444", False, True)
    assert is_lossless(lossless) and not is_lossless(plain)
    buf = io.BytesIO()  # a lossless SOF3 marker inside an EXIF segment is not the frame's
    Image.fromarray(fj.pixels(64, 48, 1)).save(buf, "JPEG", exif=b"Exif\x00\x00\xff\xc3\x00\x11" + bytes(20))
    assert b"\xff\xc3" in buf.getvalue() and not is_lossless(buf.getvalue())
    assert jpeg_size(lossless) is None and jpeg_size(plain) == (64, 48)
    with pytest.raises(DecodeError, match="lossless JPEG cannot be decoded at a DCT scale"):
        decode_image(lossless, ScaledDecode(2, 32, 24))
    assert decode_image(lossless).shape == (48, 64, 3)


def test_windows_and_scales_no_jpeg_takes_are_refused_before_the_library():
    data = fj.pillow(fj.pixels(64, 48, 2), "420", False, False)
    for args, what in (
        ((0, 0, 8, 8, 3), "denominator must be one of"),
        ((0, 0, 8, 8, 16), "denominator must be one of"),
        ((-1, 0, 8, 8), "x, y, margin >= 0"),
        ((0, 0, 0, 8), "w, h >= 1"),
        ((0, 0, 8, -2), "w, h >= 1"),
    ):
        with pytest.raises(ValueError, match=what):
            turbo.decode_window(data, *args)
    assert turbo.decode_window(data, 60, 0, 5, 8) is None  # past the right edge
    assert turbo.decode_window(data, 0, 0, 8, 7, 8) is None  # past the bottom of the 8x6 scaled image
    arr, dx, dy = turbo.decode_window(data, 7, 5, 1, 1, 8, 2)  # the last pixel at 1/8
    assert np.array_equal(arr[dy, dx], decode_image(data, ScaledDecode(8, 8, 6))[5, 7])
    assert crop_window.window_decode(data, (64, 48), [Crop(3, 3, 0, 5), Resize(4, 4)]) is None


def test_the_fuzzers_nastiest_cases_end_in_no_signal_and_a_named_outcome():
    """Each case: the window's pixels equal to the full decode's crop, None, or a named error
    (`TurboError`, `DecodeError` in a `SampleError`, ValueError for an argument). One child
    process runs them all in order (a crash is its signal, named with the case it died in)."""
    cmd = [sys.executable, str(FUZZ / "fuzz_decode_window.py"), "--child", "--nasty", "--stop", "1000"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    started = [r["start"] for r in lines if "start" in r]
    done = [r for r in lines if "outcome" in r]
    assert proc.returncode == 0, f"died ({proc.returncode}) in nasty case {started[-1:]}: {proc.stderr[-2000:]}"
    bad = [r for r in done if r["outcome"] in ("mismatch", "unexpected")]
    assert not bad and len(done) == len(started) >= 40, bad


def _without(data: bytes, marker: int) -> bytes:
    """``data`` without its header's segments of ``marker`` (DQT 0xDB, DHT 0xC4)."""
    out, at = bytearray(), 0
    for m, start, end in jpeg_segments(data):
        if m == marker:
            out += data[at:start]
            at = end
    return bytes(out + data[at:])


def _outcome(data: bytes, rec, after: bytes | None = None):
    """The kernel's answer for ``data`` on a thread of its own, which decoded ``after`` first."""
    import threading

    import torch

    from hybridload.errors import SampleError
    from hybridload._kernels.batch import process_payload
    from hybridload.sources import SampleRef

    got: list = []

    def run():
        if after is not None:
            process_payload(SampleRef(0, "before.jpg", 0), after, rec, 0, 0)
        try:
            got.append(process_payload(SampleRef(1, "missing.jpg", 0), data, rec, 0, 0))
        except SampleError as exc:
            got.append((exc.stage, exc.reason))

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=60)
    assert not t.is_alive() and len(got) == 1
    return got[0].tolist() if isinstance(got[0], torch.Tensor) else got[0]


@pytest.mark.parametrize("marker", [0xDB, 0xC4], ids=["no-quantization-tables", "no-huffman-tables"])
def test_a_jpeg_missing_its_tables_decodes_alike_whatever_its_thread_decoded_before(marker):
    """libjpeg-turbo keeps the tables of the last JPEG a decompressor read and decodes a JPEG
    that lacks its own with them: the window of a JPEG without quantization tables came out in
    another sample's tables on a thread that had decoded one, where a fresh thread, and the full
    decode, refuse it (and one without Huffman tables in the other's codes, not the standard ones
    libjpeg-turbo supplies). Every JPEG gets a decompressor of its own."""
    from hybridload import recipe

    rec = recipe.Recipe([recipe.Decode(), recipe.RandomResizedCrop(24), recipe.HorizontalFlip()])
    full = recipe.Recipe([recipe.Decode(crop_window=False), recipe.RandomResizedCrop(24), recipe.HorizontalFlip()])
    optimized = io.BytesIO()  # Huffman codes of its own, not the standard tables
    Image.fromarray(fj.pixels(203, 101, 3)).save(optimized, "JPEG", quality=60, optimize=True)
    before = optimized.getvalue()
    missing = _without(fj.pillow(fj.pixels(203, 101, 4), "420", False, False), marker)
    alone = _outcome(missing, rec)
    assert _outcome(missing, rec, after=before) == alone
    assert _outcome(missing, full, after=before) == alone
