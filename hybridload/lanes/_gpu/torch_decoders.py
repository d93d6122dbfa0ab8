"""The torch engine's JPEG decoders: torchcodec's where installed and working, else torchvision's;
both batched, host-synchronised, kept in order by the lane's one wait and sharing nvJPEG's status
codes, with EXIF orientation ignored as in every lane
(docs/decisions/torch-decode-waits-for-its-stream.md)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from hybridload.delivery._transfer import resolve_device
from hybridload.errors import LaneUnavailableError
from hybridload._extras import install_hint
from hybridload._kernels.jpeg_markers import EOI, SOS, STANDALONE, jpeg_segments

Decoder = Callable[[Sequence[torch.Tensor]], list]
BACKENDS = ("torchcodec", "torchvision")


@dataclass(frozen=True)
class NamedDecoder:
    """A `Decoder` that says which backend it is (the lane's description names it)."""

    decode: Decoder
    backend: str

    def __call__(self, datas: Sequence[torch.Tensor]) -> list:
        return self.decode(datas)


def without_exif(payload: bytes) -> bytes:
    """``payload`` with its APP1 "Exif" segments removed (the rest byte for byte); unchanged when it has none."""
    if payload[:2] != b"\xff\xd8":
        return payload
    pos, kept, dropped = 2, [payload[:2]], False
    for marker, start, end in jpeg_segments(payload):
        if marker in (SOS, EOI):  # no more metadata
            break
        if (marker not in STANDALONE and end - start < 4) or end > len(payload):
            break  # a length under 2 or past the end: keep the rest as it is
        if marker == 0xE1 and payload[start + 4 : start + 10] == b"Exif\x00\x00":
            dropped = True
        else:
            kept.append(payload[pos:end])  # fill bytes before its marker included
        pos = end
    return b"".join(kept) + payload[pos:] if dropped else payload


def torchvision_decoder(device: torch.device) -> Decoder:
    """Batched decode through torchvision's nvJPEG (RGB, EXIF orientation ignored), always naming
    the same indexed device, since torchvision builds a new decoder whenever the device named
    changes."""
    device = resolve_device(device)
    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except Exception as exc:
        raise LaneUnavailableError(
            f"the torch GPU engine needs torchvision or torchcodec ({type(exc).__name__}: "
            f"{exc}); {install_hint('torch-gpu')}"
        ) from None

    def decode(datas: Sequence[torch.Tensor]) -> list:
        return decode_jpeg(list(datas), mode=ImageReadMode.RGB, device=device, apply_exif_orientation=False)

    return decode


def torchcodec_decoder(device: torch.device) -> Decoder:
    """Batched decode through torchcodec's nvJPEG, EXIF segments removed first (it applies
    orientation unconditionally)."""
    device = resolve_device(device)
    try:
        from torchcodec.decoders import decode_jpeg
    except Exception as exc:
        raise LaneUnavailableError(f"torchcodec is not usable ({type(exc).__name__}: {exc})") from None

    def decode(datas: Sequence[torch.Tensor]) -> list:
        plain = [torch.frombuffer(bytearray(without_exif(d.numpy().tobytes())), dtype=torch.uint8) for d in datas]
        return decode_jpeg(plain, mode="RGB", device=device)

    return decode


MAKERS = {"torchcodec": torchcodec_decoder, "torchvision": torchvision_decoder}


def _tiny_jpeg() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (120, 60, 30)).save(buf, format="JPEG")
    return buf.getvalue()


def gpu_decoder(device, backends: Sequence[str] = BACKENDS, makers: dict | None = None) -> Decoder:
    """The first backend of ``backends`` that decodes a small JPEG on ``device`` (nvJPEG fails on
    the driver, CUDA or memory at the first decode, not at import).

    Raises:
        LaneUnavailableError: no backend works, with each one's reason.
    """
    makers = makers or MAKERS
    probe = [torch.frombuffer(bytearray(_tiny_jpeg()), dtype=torch.uint8)]
    reasons = []
    for name in backends:
        try:
            decode = makers[name](device)
            decode(probe)
        except Exception as exc:
            text = str(exc).splitlines()[0][:300] if str(exc) else ""
            reasons.append(f"{name}: {type(exc).__name__}: {text}")
            continue
        return NamedDecoder(decode, name)
    raise LaneUnavailableError(f"no JPEG decoder works on {device} ({'; '.join(reasons)})")


def backend_name(backends: Sequence[str] = BACKENDS) -> str:
    """The first of ``backends`` that imports here (without decoding), or "none"."""
    import importlib.util

    for name in backends:
        if importlib.util.find_spec(name) is not None:
            return name
    return "none"
