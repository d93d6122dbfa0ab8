"""The marker segments of a JPEG's header, walked once for every reader of them.

The lossless check before a scaled decode (`decode.is_lossless`), the EXIF strip before
torchcodec (`lanes/gpu/torch_decoders.without_exif`) and the benchmarks' damage and
bad-file makers read the same layout (ITU T.81 B.1.1): after SOI, each segment is 0xFF, a
marker byte, and (except TEM, RST0-7, SOI and EOI, which stand alone) a 2-byte big-endian
length counting itself. Any number of 0xFF fill bytes may precede a marker; libjpeg skips
them, and so does this walk.
"""

from __future__ import annotations

from typing import Iterator

#: Start of scan: the entropy-coded data follows its segment, so the walk ends there.
SOS = 0xDA
#: End of image.
EOI = 0xD9
#: Markers without a length field: TEM, RST0-7, SOI, EOI.
STANDALONE = frozenset((0x01, *range(0xD0, 0xDA)))


#: One marker segment: (marker, start, end). ``marker``: the byte after 0xFF (0xC0 for SOF0,
#: 0xE1 for APP1, ...); ``start``: the offset of its 0xFF; ``end``: the offset just past it,
#: ``start + 2 + length`` as its length field says (which may point past the data: a reader
#: that slices checks it), ``start + 2`` for a standalone marker. A plain tuple: the lossless
#: check walks every scaled decode's header, and a named tuple doubles the walk's ~1 us.
Segment = tuple[int, int, int]


def jpeg_segments(data: bytes | bytearray, start: int = 2) -> Iterator[Segment]:
    """The segments of ``data`` from ``start`` (just past SOI) up to and including SOS or EOI.

    Stops at the first byte that is not 0xFF (no marker where one should be) or where a
    length field is cut off by the end of the data; fill bytes are skipped."""
    k, n = start, len(data)
    while k + 2 <= n and data[k] == 0xFF:
        marker = data[k + 1]
        if marker == 0xFF:  # a fill byte
            k += 1
            continue
        if marker in STANDALONE:
            yield marker, k, k + 2
            if marker == EOI:
                return
            k += 2
            continue
        if k + 4 > n:
            return
        end = k + 2 + (data[k + 2] << 8 | data[k + 3])
        yield marker, k, end
        if marker == SOS:
            return
        k = end
