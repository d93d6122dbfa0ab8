"""The structure check every lane runs on a JPEG before any decoder sees it: a few microseconds of
header and tail against half a strict decode, so every lane refuses the same files and none that
libjpeg-turbo's strict decode accepts (docs/guide/guarantees.md#bad-input)."""

from __future__ import annotations

from hybridload._kernels.decode import DecodeError, check_pixels
from hybridload._kernels.jpeg_markers import SOS, jpeg_segments

#: Start-of-frame markers (DHT 0xC4, JPG 0xC8 and DAC 0xCC share the range but are not frames).
SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: Huffman-coded DCT frames, whose blocks each cost at least one code: baseline, extended, progressive.
_SEQUENTIAL = frozenset((0xC0, 0xC1))
_PROGRESSIVE = 0xC2
_EOI = b"\xff\xd9"


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _refuse(why: str) -> DecodeError:
    return DecodeError(f"damaged JPEG: {why}")


class _Frame:
    """A frame header's size and each component's sampling factors, by component id."""

    def __init__(self, marker: int, body: bytes | bytearray):
        n = body[5] if len(body) >= 6 else 0
        if not 1 <= n <= 4 or len(body) != 6 + 3 * n:
            raise _refuse(f"a frame header of {len(body) + 2} bytes for {n} components")
        self.marker = marker
        self.height, self.width = body[1] << 8 | body[2], body[3] << 8 | body[4]
        self.sampling: dict[int, tuple[int, int]] = {}
        self.hmax = self.vmax = 1
        for c in range(7, 6 + 3 * n, 3):  # (id, h << 4 | v, table) per component
            h, v = body[c] >> 4, body[c] & 15
            if not (1 <= h <= 4 and 1 <= v <= 4):
                raise _refuse(f"sampling factors {h}x{v} outside 1-4")
            self.sampling[body[c - 1]] = (h, v)
            self.hmax, self.vmax = max(self.hmax, h), max(self.vmax, v)
        check_pixels(self.width, self.height)

    def blocks(self, ids: list[int]) -> int:
        """The 8x8 blocks a scan over the components ``ids`` codes (T.81 A.2)."""
        if len(ids) == 1:  # non-interleaved: the component's own blocks
            h, v = self.sampling[ids[0]]
            return _ceil(_ceil(self.width * h, self.hmax), 8) * _ceil(_ceil(self.height * v, self.vmax), 8)
        mcus = _ceil(self.width, 8 * self.hmax) * _ceil(self.height, 8 * self.vmax)
        return mcus * sum(h * v for h, v in (self.sampling[i] for i in ids))

    def scan_floor_bits(self, body: bytes | bytearray) -> int:
        """The fewest bits the scan whose header is ``body`` can code its blocks in: 2 a block in a
        sequential Huffman scan (a DC and an AC code), 1 in a progressive DC scan, else 0."""
        n = body[0] if body else 0
        if not 1 <= n <= 4 or len(body) != 4 + 2 * n:
            raise _refuse(f"a scan header of {len(body) + 2} bytes for {n} components")
        ids = [body[1 + 2 * c] for c in range(n)]
        if any(i not in self.sampling for i in ids):
            raise _refuse(f"a scan over component(s) {ids} the frame lacks ({sorted(self.sampling)})")
        if self.marker in _SEQUENTIAL:
            return 2 * self.blocks(ids)
        if self.marker == _PROGRESSIVE and body[1 + 2 * n] == 0:  # spectral selection from 0: a DC scan
            return self.blocks(ids)
        return 0


def check_jpeg(data: bytes | bytearray) -> None:
    """Refuse (`DecodeError`, saying what is wrong) a JPEG whose structure no strict decoder
    accepts. ``data`` starts with SOI."""
    n, frame = len(data), None
    for marker, start, end in jpeg_segments(data):
        if end > n:
            raise _refuse(f"the segment at byte {start} (marker 0x{marker:02X}) runs past the data's {n} bytes")
        if marker in SOF_MARKERS and frame is None:
            frame = _Frame(marker, data[start + 4 : end])
        elif marker == SOS:
            if frame is None:
                raise _refuse("its image data (SOS) comes before any frame header (SOF)")
            floor = frame.scan_floor_bits(data[start + 4 : end])
            eoi = data.rfind(_EOI, end)
            if eoi < 0:
                raise _refuse(f"no end-of-image marker after its image data starts at byte {end} (truncated?)")
            if (eoi - end) * 8 < floor:
                raise _refuse(
                    f"its {frame.width}x{frame.height} frame needs at least {_ceil(floor, 8)} bytes of "
                    f"image data and the file holds {eoi - end}: the header does not match the data"
                )
            return
    raise _refuse(f"no image data: its {n} bytes end before a scan (SOS) begins (a header only, or truncated)")
