#!/usr/bin/env python
"""Fuzz the crop-window decode (issue 37) in subprocesses, so that a crash in libturbojpeg is
seen as a signal instead of killing the caller.

Each case draws (from ``--seed`` and its number alone) a base JPEG (`_fuzz_jpegs`: every
subsampling, baseline, progressive, restart markers, arithmetic, grey, CMYK, 12-bit, lossless,
1x1 to 1203x901), a kind of damage (truncated at a drawn cut, with or without an EOI marker put
back, flipped bytes in the header, SOF dimensions or sampling factors, Huffman and quantization
tables, SOS, the entropy-coded data, inserted markers, a dropped segment, a DRI), a window (on,
inside or over the edges, 0 and 1 px, every scale factor and some the library refuses, margins
0-8) and a route: `turbo.decode_window`, `crop_window.window_decode` or the kernel's
`process_payload` with ``Decode(crop_window=True)`` against ``crop_window=False``.

A case passes when it ends in no signal and in one of: the window's pixels equal to the same
crop of the full decode (undamaged JPEGs), None (the full decode takes it), a named error
(`TurboError`, `DecodeError` in a `SampleError`, ValueError for an argument) or, damaged JPEGs
only, pixels where the full decode raised (damage the window never reads) or where both decode
without an error but differ (``pixels-differ``). A child runs the cases in order; one killed by
a signal is restarted after its case, which is then run again alone.

    python tools/fuzz/fuzz_decode_window.py --seed 1 --cases 3000
    python tools/fuzz/fuzz_decode_window.py --seed 1 --case 117   # one case, in this process
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import random
import signal
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # support/: helpers the tests share

from _fuzz_nasty import nasty_cases
from hybridload import recipe
from hybridload.errors import SampleError
from hybridload._kernels import crop_window, turbo
from hybridload._kernels.batch import process_payload
from hybridload._kernels.dct_scale import ScaledDecode, scaled_size
from hybridload._kernels.decode import DecodeError, decode_image, jpeg_size
from hybridload.recipe._ops import Crop, Resize
from hybridload.sources import SampleRef
from support import jpegs as fj

log = logging.getLogger("fuzz_decode_window")
ROUTES = ("decode_window", "window_decode", "process_payload")
#: outcomes that are a finding (the rest are the named errors or equal pixels)
BAD = ("mismatch", "unexpected")


@lru_cache(maxsize=4)
def _bases(seed: int) -> list[tuple[str, bytes]]:
    return fj.base_images(seed)


def draw(seed: int, i: int) -> dict:
    """Case ``i`` of ``seed``: a pure function of the two."""
    rng = random.Random(f"{seed}:{i}")
    name, data = rng.choice(_bases(seed))
    damage, data = fj.mutate(data, rng) if rng.random() < 0.8 else ("none", data)
    w, h = (int(v) for v in name.rsplit("-", 1)[1].split("x"))
    route = rng.choice(ROUTES)
    x, y, cw, ch, d, margin = fj.window(w, h, rng, scaled=route == "decode_window")
    extra = {"out": (rng.choice((1, 2, 7, 24, 224)), rng.choice((1, 3, 24, 224))), "dct": rng.random() < 0.5}
    extra["gap"] = rng.choice((1.0, 2.0, 1.5))
    extra["crop"] = rng.choice(("rrc", "center", "random"))
    return {
        "i": i,
        "base": name,
        "damage": damage,
        "data": data,
        "window": (x, y, cw, ch, d, margin),
        "route": route,
        **extra,
    }


def _reference(data: bytes, d: int) -> np.ndarray | None:
    """The whole image decoded at 1/``d`` by simplejpeg; None where 1/``d`` and 1/(``d``/2)
    give the same size (images of a few pixels), since simplejpeg then picks the larger."""
    if d == 1:
        return decode_image(data)
    full = jpeg_size(data)
    size = scaled_size(*full, d)
    if size == scaled_size(*full, d // 2):
        return None
    return decode_image(data, ScaledDecode(d, *size))


def _check_decode_window(case: dict) -> tuple[str, str]:
    x, y, cw, ch, d, margin = case["window"]
    try:
        got = turbo.decode_window(case["data"], x, y, cw, ch, d, margin)
    except turbo.TurboError as exc:  # on an undamaged JPEG: a handle left broken by an earlier one
        return ("unexpected" if case["damage"] == "none" else "TurboError"), str(exc)[:80]
    except ValueError as exc:  # a window or scale refused before the library is called
        return "ValueError", str(exc)[:80]
    if got is None:
        return "None", ""
    arr, dx, dy = got
    if case["damage"] != "none":
        return "pixels", f"{arr.shape}"
    try:
        ref = _reference(case["data"], d)
    except DecodeError as exc:
        return "unexpected", f"window decoded, full decode refused: {exc}"[:200]
    if margin < 2 or ref is None:
        return "pixels", "not compared (margin < 2: edges may differ; or no reference at this scale)"
    hh, ww = ref.shape[:2]
    x1, y1 = min(x + cw, ww, x + arr.shape[1] - dx), min(y + ch, hh, y + arr.shape[0] - dy)
    if not np.array_equal(arr[dy : dy + y1 - y, dx : dx + x1 - x], ref[y:y1, x:x1]):
        return "mismatch", f"window differs from the full decode's crop ({arr.shape}, dx={dx}, dy={dy})"
    return "pixels", "equal"


def _check_window_decode(case: dict) -> tuple[str, str]:
    data = case["data"]
    size = jpeg_size(data)
    if size is None:
        return "no-size", ""
    x, y, cw, ch, _d, _m = case["window"]
    ops = (Crop(x, y, cw, ch), Resize(*case["out"]))
    try:
        got = crop_window.window_decode(data, size, ops, case["dct"], case["gap"])
    except (ValueError, ZeroDivisionError) as exc:
        return "unexpected", f"{type(exc).__name__}: {exc}"[:200]
    return ("None", "") if got is None else ("pixels", f"{got[0].shape}")


_CROPS = {
    "rrc": recipe.RandomResizedCrop,
    "center": recipe.CenterCrop,
    "random": lambda s: recipe.RandomResizedCrop(s, scale=(0.01, 1.0)),
}


def _check_process_payload(case: dict) -> tuple[str, str]:
    size = case["out"][0]
    results = []
    for window in (True, False):
        dec = recipe.Decode(crop_window=window, dct_scaling=case["dct"], reducing_gap=case["gap"])
        rec = recipe.Recipe([dec, _CROPS[case["crop"]](size), recipe.HorizontalFlip()])
        try:
            results.append(process_payload(SampleRef(case["i"], "fuzz.jpg", 0), case["data"], rec, 0, 0))
        except SampleError as exc:
            results.append(exc)
        except Exception as exc:  # noqa: BLE001 - any other exception is a finding
            return "unexpected", f"crop_window={window}: {type(exc).__name__}: {exc}"[:200]
    win, full = results
    if isinstance(win, torch.Tensor) and isinstance(full, torch.Tensor):
        if torch.equal(win, full):
            return "pixels", "equal"
        return ("mismatch" if case["damage"] == "none" else "pixels-differ"), "window != full decode"
    if isinstance(win, SampleError) and isinstance(full, SampleError):
        if (win.stage, win.reason) == (full.stage, full.reason):
            return "SampleError", "same"
        return "SampleError-differs", f"window: {win.reason[:60]} / full: {full.reason[:60]}"
    if isinstance(win, torch.Tensor):  # the damage lies where the window never reads
        return ("mismatch" if case["damage"] == "none" else "pixels-full-raised"), str(full)[:120]
    return "mismatch", f"window raised, full decoded: {win}"[:200]


CHECKS = {
    "decode_window": _check_decode_window,
    "window_decode": _check_window_decode,
    "process_payload": _check_process_payload,
}


def run_case(case: dict) -> tuple[str, str]:
    return CHECKS[case["route"]](case)


def describe(case: dict) -> str:
    x, y, cw, ch, d, m = case["window"]
    return f"case {case['i']}: {case['base']}, {case['damage']}, {case['route']}, window ({x}, {y}, {cw}, {ch}) 1/{d} margin {m}"


def case_at(seed: int, i: int, nasty: bool) -> dict:
    return nasty_cases()[i] if nasty else draw(seed, i)


def child(seed: int, start: int, stop: int, nasty: bool = False) -> int:
    torch.set_num_threads(1)
    fixed = nasty_cases() if nasty else None
    for i in range(start, min(stop, len(fixed)) if fixed else stop):
        case = fixed[i] if fixed else draw(seed, i)
        print(json.dumps({"start": i}), flush=True)
        try:
            outcome, detail = run_case(case)
        except Exception as exc:  # noqa: BLE001 - an exception escaping a route is a finding
            outcome, detail = "unexpected", f"{type(exc).__name__}: {exc}"[:200]
        print(
            json.dumps(
                {
                    "i": i,
                    "route": case["route"],
                    "damage": case["damage"].split()[0],
                    "outcome": outcome,
                    "detail": detail,
                }
            ),
            flush=True,
        )
    return 0


def fuzz(seed: int, cases: int, timeout: float, nasty: bool = False) -> dict:
    """Run ``cases`` cases (or the ``nasty`` ones) in child processes; return the tallies,
    crashes and findings."""
    if nasty:
        cases = len(nasty_cases())
    tally: collections.Counter = collections.Counter()
    crashes, findings, start = [], [], 0
    while start < cases:
        cmd = [sys.executable, __file__, "--child", "--seed", str(seed), "--start", str(start), "--stop", str(cases)]
        cmd += ["--nasty"] if nasty else []
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        last = start
        for line in proc.stdout.splitlines():
            rec = json.loads(line)
            if "start" in rec:
                last = rec["start"]
                continue
            last = rec["i"] + 1
            tally[(rec["route"], rec["damage"], rec["outcome"])] += 1
            if rec["outcome"] in BAD:
                findings.append(rec)
        if proc.returncode == 0:
            break
        crashes.append({"i": last, "returncode": proc.returncode, "stderr": proc.stderr[-400:]})
        log.warning("child died (%s) in case %d", _signal_name(proc.returncode), last)
        start = last + 1
    for crash in crashes[:20]:  # alone: does it crash by itself?
        cmd = [sys.executable, __file__, "--case", str(crash["i"]), "--seed", str(seed)] + (
            ["--nasty"] if nasty else []
        )
        alone = subprocess.run(cmd, capture_output=True, timeout=timeout)
        crash["alone_returncode"] = alone.returncode
        crash["case"] = describe(case_at(seed, crash["i"], nasty))
    return {"tally": tally, "crashes": crashes, "findings": findings, "cases": cases}


def _signal_name(rc: int) -> str:
    return signal.Signals(-rc).name if rc < 0 else f"exit {rc}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--case", type=int, help="run this one case here and print its outcome")
    p.add_argument(
        "--nasty", action="store_true", help="run the fixed nastiest cases (nasty_cases) instead of drawn ones"
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds for one child process")
    p.add_argument("--json", help="write the result here as JSON")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--stop", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not turbo.available():
        log.error("the turbojpeg wheel is not installed: nothing to fuzz")
        return 2
    if args.child:
        return child(args.seed, args.start, args.stop, args.nasty)
    if args.case is not None:
        case = case_at(args.seed, args.case, args.nasty)
        log.info("%s -> %s", describe(case), run_case(case))
        return 0
    t0 = time.monotonic()
    got = fuzz(args.seed, args.cases, args.timeout, args.nasty)
    log.info(
        "%d cases, %s, %.0f s",
        got["cases"],
        "the nasty ones" if args.nasty else f"seed {args.seed}",
        time.monotonic() - t0,
    )
    for (route, damage, outcome), n in sorted(got["tally"].items()):
        log.info("  %-16s %-14s %-20s %d", route, damage, outcome, n)
    for crash in got["crashes"]:
        log.info(
            "CRASH %s: %s (alone: %s)",
            _signal_name(crash["returncode"]),
            crash["case"],
            _signal_name(crash["alone_returncode"]),
        )
    for f in got["findings"]:
        log.info("FINDING %s", f)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({**got, "tally": [[*k, n] for k, n in got["tally"].items()]}, fh, indent=1)
    return 1 if got["crashes"] or got["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
