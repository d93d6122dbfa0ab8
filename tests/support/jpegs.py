"""The JPEGs and the damage `tools/fuzz/fuzz_decode_window.py` feeds the crop-window decode (issue 37).

Base images are encoded by libjpeg-turbo 3 itself (the ``turbojpeg`` wheel's library, through
ctypes) where Pillow cannot write them (4:4:0, 4:1:1, 4:4:1, arithmetic coding, 12-bit,
lossless) and by Pillow otherwise (4:4:4, 4:2:2, 4:2:0, grey, CMYK, progressive, restart
markers). Every draw is a pure function of the ``random.Random`` it is given.
"""

from __future__ import annotations

import ctypes
import io
import random
import struct

import numpy as np
from PIL import Image

from hybridload._kernels import turbo
from hybridload._kernels.dct_scale import scaled_size
from hybridload._kernels.jpeg_markers import jpeg_segments

# turbojpeg.h (TurboJPEG 3)
_TJINIT_COMPRESS = 0
_TJPARAM = {"quality": 3, "subsamp": 4, "progressive": 12, "arithmetic": 14, "lossless": 15, "restartrows": 19}
_TJPF_RGB = 0
#: TJSAMP values Pillow cannot write: 4:4:0, 4:1:1, 4:4:1.
TJ_SUBSAMPLINGS = {"440": 4, "411": 5, "441": 6}
SIZES = ((1, 1), (2, 3), (7, 9), (8, 8), (15, 17), (16, 16), (17, 33), (33, 47), (64, 48), (129, 95), (321, 241))
BIG = (1203, 901)
_EOI = b"\xff\xd9"


def pixels(w: int, h: int, seed: int, discs: int = 4, radius: tuple[int, int] | None = None) -> np.ndarray:
    """Photo-like ``w`` x ``h`` RGB pixels: gradients, ``discs`` discs of a radius drawn from
    ``[radius[0], radius[1])`` (by default 1 up to the shorter side), grain. The JPEG tests'
    photo (`tests/support/photos.py`) is 12 discs of radius 30-200."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255 // max(w, 1), y * 255 // max(h, 1), (x + y) % 256], -1).astype(np.float32)
    low, high = radius or (1, max(2, min(w, h)))
    for _ in range(discs):
        cx, cy, r = rng.integers(0, w), rng.integers(0, h), rng.integers(low, high)
        img[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = rng.integers(0, 256, 3)
    return np.clip(img + rng.normal(0, 4, img.shape), 0, 255).astype(np.uint8)


def pillow(img: np.ndarray, kind: str, progressive: bool, restart: bool) -> bytes:
    im, buf = Image.fromarray(img), io.BytesIO()
    extra = {"restart_marker_rows": 1} if restart else {}
    if kind == "gray":
        im.convert("L").save(buf, "JPEG", quality=90, progressive=progressive, **extra)
    elif kind == "cmyk":
        im.convert("CMYK").save(buf, "JPEG", quality=90, progressive=progressive, **extra)
    else:
        sub = {"444": 0, "422": 1, "420": 2}[kind]
        im.save(buf, "JPEG", quality=90, progressive=progressive, subsampling=sub, **extra)
    return buf.getvalue()


def tj_compress(img: np.ndarray, params: dict[str, int], bits: int = 8) -> bytes | None:
    """``img`` encoded by libjpeg-turbo 3 with TJPARAM ``params``; None where it refuses."""
    lib = turbo._LIB  # noqa: SLF001 - the fuzzer drives the same library the kernel loads
    handle = lib.tj3Init(_TJINIT_COMPRESS)
    try:
        for name, value in params.items():
            if lib.tj3Set(ctypes.c_void_p(handle), _TJPARAM[name], value) != 0:
                return None
        h, w = img.shape[:2]
        out, size = ctypes.c_void_p(), ctypes.c_size_t()
        src = np.ascontiguousarray(img if bits == 8 else img.astype(np.uint16) << 4)
        fn = lib.tj3Compress8 if bits == 8 else lib.tj3Compress12
        rc = fn(
            ctypes.c_void_p(handle),
            ctypes.c_void_p(src.ctypes.data),
            w,
            0,
            h,
            _TJPF_RGB,
            ctypes.byref(out),
            ctypes.byref(size),
        )
        if rc != 0 or not out.value:
            return None
        data = ctypes.string_at(out.value, size.value)
        lib.tj3Free(out)
        return data
    finally:
        lib.tj3Destroy(ctypes.c_void_p(handle))


def base_images(seed: int) -> list[tuple[str, bytes]]:
    """(name, JPEG bytes): every kind at a few sizes drawn from ``seed``, the big one included."""
    rng = random.Random(seed)
    out: list[tuple[str, bytes]] = []
    sizes = [*SIZES, BIG]
    for kind in ("444", "422", "420", "gray", "cmyk"):
        for progressive in (False, True):
            for w, h in rng.sample(sizes, 4) + [BIG]:
                restart = rng.random() < 0.3
                data = pillow(pixels(w, h, rng.randrange(1 << 30)), kind, progressive, restart)
                tag = ("prog" if progressive else "base") + ("-rst" if restart else "")
                out.append((f"{kind}-{tag}-{w}x{h}", data))
    tj_kinds = [(k, {"subsamp": v}) for k, v in TJ_SUBSAMPLINGS.items()]
    tj_kinds += [
        ("420-arith", {"subsamp": 2, "arithmetic": 1}),
        ("420-arith-prog", {"subsamp": 2, "arithmetic": 1, "progressive": 1}),
    ]
    tj_kinds += [("411-prog", {"subsamp": 5, "progressive": 1}), ("440-rst", {"subsamp": 4, "restartrows": 1})]
    tj_kinds += [("lossless", {"lossless": 1})]
    for name, params in tj_kinds:
        for w, h in rng.sample(sizes, 3) + [BIG]:
            data = tj_compress(pixels(w, h, rng.randrange(1 << 30)), {"quality": 90, **params})
            if data is not None:
                out.append((f"{name}-{w}x{h}", data))
    for w, h in rng.sample(sizes, 2):
        data = tj_compress(pixels(w, h, rng.randrange(1 << 30)), {"quality": 90, "subsamp": 2}, bits=12)
        if data is not None:
            out.append((f"12bit-{w}x{h}", data))
    return out


def _flip(data: bytearray, lo: int, hi: int, rng: random.Random, n: int = 1) -> None:
    for _ in range(n):
        if hi > lo:
            i = rng.randrange(lo, hi)
            data[i] = rng.choice((data[i] ^ (1 << rng.randrange(8)), rng.randrange(256), 0, 0xFF))


DIMS = (0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 255, 4096, 20000, 65500, 65535)
MUTATIONS = (
    "none",
    "truncate",
    "truncate+eoi",
    "header",
    "sof-dims",
    "sof-sampling",
    "dht",
    "dqt",
    "sos",
    "entropy",
    "marker",
    "drop",
    "dri",
)


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One drawn kind of damage to ``data``: (description, damaged bytes)."""
    kind = rng.choice(MUTATIONS)
    segs = list(jpeg_segments(data))  # (marker, start, end) up to and including SOS
    scan = segs[-1][2] if segs and segs[-1][0] == 0xDA else 2
    buf = bytearray(data)
    by = {m: (s, e) for m, s, e in segs}
    sof = next(((s, e) for m, s, e in segs if m in (0xC0, 0xC1, 0xC2, 0xC3, 0xC9, 0xCA)), None)
    if kind in ("truncate", "truncate+eoi"):
        cut = rng.choice(
            (
                rng.randrange(1, len(data)),
                rng.randrange(scan, len(data)) if scan < len(data) else 1,
                len(data) - 2,
                len(data) - 1,
                scan,
            )
        )
        out = bytes(data[:cut]) + (_EOI if kind == "truncate+eoi" else b"")
        return f"{kind} at {cut}", out
    if kind == "header":
        _flip(buf, 2, scan, rng, rng.randint(1, 4))
    elif kind == "sof-dims" and sof:
        hgt, wid = rng.choice(DIMS + (rng.randrange(65536),)), rng.choice(DIMS + (rng.randrange(65536),))
        which = rng.choice(("both", "w", "h"))
        if which in ("both", "h"):
            buf[sof[0] + 5 : sof[0] + 7] = struct.pack(">H", hgt)
        if which in ("both", "w"):
            buf[sof[0] + 7 : sof[0] + 9] = struct.pack(">H", wid)
        return f"sof-dims {which} h={hgt} w={wid}", bytes(buf)
    elif kind == "sof-sampling" and sof:
        ncomp = buf[sof[0] + 9]
        c = rng.randrange(max(ncomp, 1))
        pos = sof[0] + 10 + 3 * c + 1
        if pos < len(buf):
            buf[pos] = rng.choice(
                (0x11, 0x12, 0x21, 0x22, 0x41, 0x14, 0x44, 0x13, 0x31, 0x00, 0x10, 0x01, rng.randrange(256))
            )
            return f"sof-sampling comp {c} = {buf[pos]:#x}", bytes(buf)
    elif (
        kind in ("dht", "dqt", "sos", "dri")
        and (0xC4, 0xDB, 0xDA, 0xDD)[("dht", "dqt", "sos", "dri").index(kind)] in by
    ):
        s, e = by[(0xC4, 0xDB, 0xDA, 0xDD)[("dht", "dqt", "sos", "dri").index(kind)]]
        _flip(buf, s + 2, e, rng, rng.randint(1, 3))
    elif kind == "dri":
        interval = rng.choice((0, 1, 2, 3, 7, 65535))
        at = segs[-1][1] if segs else 2
        buf[at:at] = b"\xff\xdd\x00\x04" + struct.pack(">H", interval)
        return f"dri {interval} inserted", bytes(buf)
    elif kind == "entropy" and scan < len(data) - 2:
        _flip(buf, scan, len(data) - 2, rng, rng.randint(1, 8))
    elif kind == "marker" and scan < len(data) - 2:
        at = rng.randrange(scan, len(data) - 2)
        buf[at:at] = bytes(
            (0xFF, rng.choice((0xD0, 0xD3, 0xD7, 0xD9, 0xD8, 0xC4, 0xDA, 0x00, 0xFF, rng.randrange(256))))
        )
    elif kind == "drop" and len(segs) > 1:
        _m, s, e = rng.choice(segs[:-1])
        del buf[s:e]
    else:
        return "none", data
    return kind, bytes(buf)


def window(w: int, h: int, rng: random.Random, scaled: bool) -> tuple[int, int, int, int, int, int]:
    """(x, y, cw, ch, denominator, margin): three in four inside the image (``scaled``: the
    image at 1/denominator, as `turbo.decode_window` takes it), often on its last row or column
    or 1 px wide; the rest on or over its edges, empty or negative, at a scale the library
    refuses."""
    d = rng.choice((1, 2, 4, 8))
    margin = rng.choice((0, 1, 2, 2, 3, 8))
    sw, sh = scaled_size(w, h, d) if scaled else (w, h)
    if rng.random() < 0.75:

        def start(size: int) -> int:
            return rng.choice((0, size - 1, rng.randrange(size), rng.randrange(size)))

        def extent(size: int, at: int) -> int:
            return rng.choice((1, size - at, rng.randint(1, size - at), rng.randint(1, size - at)))

        x, y = start(sw), start(sh)
        return x, y, extent(sw, x), extent(sh, y), d, margin

    def edge(size: int) -> int:
        return rng.choice((0, size - 1, size, size + 1, -1, rng.randrange(max(size, 1))))

    def over(size: int, at: int) -> int:
        return rng.choice((0, -1, size - at + 1, size + 1, 1 << 20, rng.randrange(max(size, 1) + 2)))

    x, y = edge(sw), edge(sh)
    return x, y, over(sw, x), over(sh, y), rng.choice((d, 3, 16, 0)), rng.choice((margin, -1))
