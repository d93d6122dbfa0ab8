"""What the JPEG acceptance check costs each image, against what a check of every byte would.

``python benchmarks/jpeg_check_cost.py``: photo-like JPEGs (quality 90, 4:2:0) of a few sizes;
per image, the median over interleaved rounds of: the full strict decode the CPU lanes run
(simplejpeg, ``strict=True``), the strict decode at 1/8 DCT scale (the cheapest way to have
libjpeg read every byte strictly: entropy decoding with almost no inverse DCT, what a GPU lane's
host would pay to refuse exactly what the CPU lanes refuse), and `kernels.jpeg_check.check_jpeg`
(the structure check every lane runs). Figures: benchmarks/RESULTS.md (issue 44).
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

import simplejpeg
from PIL import Image

from hybridload.kernels.jpeg_check import check_jpeg

from _fuzz_jpegs import pixels

SIZES = ((500, 375), (1203, 901), (4000, 3000))


def _jpeg(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels(w, h, 7, discs=12, radius=(30, 200))).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _per_call_us(fn, data: bytes, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(data)
    return (time.perf_counter() - t0) / calls * 1e6


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (the median is reported)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: the smallest size, 2 rounds")
    args = ap.parse_args(argv)
    sizes, rounds = (SIZES[:1], 2) if args.quick else (SIZES, args.rounds)
    ways = {
        "full strict decode": lambda d: simplejpeg.decode_jpeg(d, strict=True),
        "strict decode at 1/8": lambda d: simplejpeg.decode_jpeg(d, strict=True, min_width=1, min_height=1),
        "check_jpeg": check_jpeg,
    }
    print(
        "| image | KB | full strict decode (ms) | strict decode at 1/8 (ms, share of full) | check_jpeg (us, share of full) |"
    )
    print("| --- | --- | --- | --- | --- |")
    for w, h in sizes:
        data = _jpeg(w, h)
        calls = max(3, int(2e5 / (w * h) * 20))
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(rounds):
            for name, fn in ways.items():
                times[name].append(_per_call_us(fn, data, calls if name != "check_jpeg" else 2000))
        full, eighth, check = (statistics.median(times[name]) for name in ways)
        print(
            f"| {w}x{h} | {len(data) // 1024} | {full / 1e3:.2f} | {eighth / 1e3:.2f} ({eighth / full:.0%}) "
            f"| {check:.1f} ({check / full:.1%}) |"
        )


if __name__ == "__main__":
    main()
