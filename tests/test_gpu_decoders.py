"""The torch engine's decoder backend: torchcodec's CUDA JPEG decode where it is installed and
decodes, torchvision's otherwise, both under the lane's one stream discipline. No CUDA and no
torchcodec here: the choice is tested with makers that stand in for each backend, and the
torchcodec adapter with a fake ``torchcodec.decoders`` that records what it is given."""

from __future__ import annotations

import io
import sys
import types

import numpy as np
import pytest
import torch
from PIL import Image

from hybridload.errors import LaneUnavailableError
from hybridload._kernels import decode_image
from hybridload.lanes._gpu import torch_decoders as td


def _jpeg_with_exif(orientation: int = 6) -> bytes:
    im = Image.fromarray(np.random.default_rng(0).integers(0, 255, (24, 40, 3), dtype=np.uint8))
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=90, exif=exif.tobytes())
    return buf.getvalue()


def test_without_exif_drops_only_the_exif_segment():
    data = _jpeg_with_exif()
    plain = td.without_exif(data)
    assert b"Exif\x00\x00" in data and b"Exif\x00\x00" not in plain and len(plain) < len(data)
    assert np.array_equal(decode_image(plain), decode_image(data))  # the pixels, byte for byte
    with Image.open(io.BytesIO(plain)) as im:
        assert im.getexif().get(0x0112) is None  # no orientation left to apply
    no_exif = td.without_exif(plain)
    assert no_exif is plain  # nothing to drop: unchanged
    assert td.without_exif(b"not a jpeg") == b"not a jpeg"


def _maker(name, calls, fail=None):
    def make(device):
        def decode(datas):
            calls.append(name)
            if fail:
                raise RuntimeError(fail)
            return [torch.zeros(3, 2, 2, dtype=torch.uint8) for _ in datas]

        return decode

    return make


def test_torchcodec_is_chosen_where_it_decodes():
    calls = []
    dec = td.gpu_decoder(
        "cpu", makers={"torchcodec": _maker("torchcodec", calls), "torchvision": _maker("torchvision", calls)}
    )
    assert dec.backend == "torchcodec" and calls == ["torchcodec"]


def test_torchvision_is_chosen_where_torchcodec_cannot_decode_on_the_device():
    calls = []
    msg = "decode_jpeg: torchcodec was not compiled with nvJPEG support, so JPEG images cannot be decoded"
    dec = td.gpu_decoder(
        "cpu", makers={"torchcodec": _maker("torchcodec", calls, fail=msg), "torchvision": _maker("torchvision", calls)}
    )
    assert dec.backend == "torchvision" and calls == ["torchcodec", "torchvision"]


def test_no_working_backend_is_one_error_naming_each_reason():
    calls = []
    with pytest.raises(LaneUnavailableError, match="torchcodec: RuntimeError: a.*torchvision: RuntimeError: b"):
        td.gpu_decoder(
            "cpu",
            makers={
                "torchcodec": _maker("torchcodec", calls, fail="a"),
                "torchvision": _maker("torchvision", calls, fail="b"),
            },
        )


def test_the_torchcodec_adapter_passes_the_batch_without_exif_as_rgb_on_the_indexed_device(monkeypatch):
    seen = {}
    fake = types.ModuleType("torchcodec.decoders")

    def decode_jpeg(source, *, mode, device):
        seen.update(source=source, mode=mode, device=device)
        return [torch.zeros(3, 1, 1, dtype=torch.uint8) for _ in source]

    fake.decode_jpeg = decode_jpeg
    monkeypatch.setitem(sys.modules, "torchcodec", types.ModuleType("torchcodec"))
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", fake)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    decode = td.torchcodec_decoder(torch.device("cuda"))
    data = _jpeg_with_exif()
    out = decode([torch.frombuffer(bytearray(data), dtype=torch.uint8)] * 2)
    assert len(out) == 2 and seen["mode"] == "RGB" and seen["device"] == torch.device("cuda", 1)
    assert all(bytes(t.numpy()) == td.without_exif(data) for t in seen["source"])
