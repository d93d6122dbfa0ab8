"""The fuzzer's nastiest cases, fixed (`fuzz_decode_window.py --nasty`; the test
`tests/test_crop_window_safety.py` runs them in a child process)."""

from __future__ import annotations

from hybridload._kernels.dct_scale import scaled_size
from hybridload._kernels.jpeg_markers import jpeg_segments
from support import jpegs as fj
from support.bad_files import huge_header


def nasty_cases() -> list[dict]:
    """The nastiest cases the fuzzer met, fixed (no draw): each crashed, corrupted the heap,
    broke the thread's decoder for later JPEGs or raised a bare exception before its fix, or
    sits on an edge (1-px windows at the last pixel at every scale, cuts put back with an EOI)."""
    lossless = fj.tj_compress(fj.pixels(1203, 901, 1), {"quality": 90, "lossless": 1})
    big = fj.pillow(fj.pixels(1203, 901, 3), "420", False, False)
    prog = fj.pillow(fj.pixels(321, 241, 2), "422", True, False)
    grey = fj.pillow(fj.pixels(8, 8, 5), "gray", False, False)
    bogus = bytearray(grey)
    sof = next(s for m, s, _e in jpeg_segments(grey) if m == 0xC0)
    bogus[sof + 11] = 0x2A  # luma sampling factors 2x10: "Bogus sampling factors"
    huge = huge_header(big, 65535)
    f441 = fj.tj_compress(fj.pixels(17, 33, 4), {"quality": 90, "subsamp": fj.TJ_SUBSAMPLINGS["441"]})
    f411 = fj.tj_compress(fj.pixels(129, 95, 6), {"quality": 90, "subsamp": fj.TJ_SUBSAMPLINGS["411"]})
    bit12 = fj.tj_compress(fj.pixels(16, 16, 7), {"quality": 90, "subsamp": 2}, bits=12)
    cmyk = fj.pillow(fj.pixels(64, 48, 8), "cmyk", True, True)
    pp = {"route": "process_payload", "window": (0, 0, 1, 1, 1, 2), "gap": 2.0, "crop": "random"}
    dw = {"route": "decode_window", "out": (1, 1), "dct": False, "gap": 2.0, "crop": "rrc"}
    cases = [
        {**pp, "base": "lossless-1203x901", "damage": "none", "data": lossless, "out": (7, 7), "dct": True},
        {
            **pp,
            "base": "lossless-1203x901",
            "damage": "truncate+eoi",
            "data": lossless[: len(lossless) // 2] + b"\xff\xd9",
            "out": (1, 1),
            "dct": True,
        },
        {**dw, "base": "gray-8x8", "damage": "sof-sampling 0x2a", "data": bytes(bogus), "window": (0, 0, 8, 8, 1, 2)},
        {**dw, "base": "420-1203x901", "damage": "none", "data": big, "window": (600, 400, 100, 80, 1, 2)},
        {**pp, "base": "441-17x33", "damage": "none", "data": f441, "out": (7, 7), "dct": True},
        {**dw, "base": "441-17x33", "damage": "none", "data": f441, "window": (0, 0, 17, 33, 1, 2)},
        {
            **pp,
            "base": "420-1203x901",
            "damage": "sof-dims 65535x65535",
            "data": huge,
            "out": (7, 7),
            "dct": True,
        },
        {
            **dw,
            "base": "420-1203x901",
            "damage": "sof-dims 65535x65535",
            "data": huge,
            "window": (0, 0, 65535, 65535, 1, 2),
        },
        {**pp, "base": "12bit-16x16", "damage": "none", "data": bit12, "out": (7, 7), "dct": True},
        {**pp, "base": "cmyk-prog-rst-64x48", "damage": "none", "data": cmyk, "out": (7, 7), "dct": True},
    ]
    for d in (1, 2, 4, 8):
        for data, name, (w, h) in ((big, "420-1203x901", (1203, 901)), (f411, "411-129x95", (129, 95))):
            sw, sh = scaled_size(w, h, d)
            for margin in (0, 2):
                cases.append(
                    {**dw, "base": name, "damage": "none", "data": data, "window": (sw - 1, sh - 1, 1, 1, d, margin)}
                )
        for cut in (0.1, 0.5, 0.9, 0.999):
            data = prog[: int(len(prog) * cut)] + b"\xff\xd9"
            cases.append(
                {
                    **dw,
                    "base": "422-prog-321x241",
                    "damage": f"truncate+eoi at {cut}",
                    "data": data,
                    "window": (0, 0, 321 // d, 241 // d, d, 2),
                }
            )
    for window in (
        (-1, 0, 8, 8, 1, 2),
        (0, 0, 0, 8, 1, 2),
        (0, 0, 8, 8, 3, 2),
        (0, 0, 8, 8, 16, 2),
        (0, 0, 8, 8, 1, -1),
    ):
        cases.append({**dw, "base": "gray-8x8", "damage": "none", "data": grey, "window": window})
    return [{**c, "i": i} for i, c in enumerate(cases)]
