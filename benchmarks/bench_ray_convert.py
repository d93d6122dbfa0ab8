"""Time a finished Ray batch holds Ray's callback thread: the copy there (before issue 35.16)
against handing it to the lane's converter threads (now), side by side.

    python benchmarks/bench_ray_convert.py --batch 64 --size 224 --rounds 200

No Ray needed: the raw result is what an actor returns (uint8 images, labels, indices, skipped,
seconds); "before" runs ``RayLane.to_batch`` (the copy) where the callback ran it, "now" what
the callback does now (``convert`` and a submit to the converter thread; the copy then runs there).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from hybridload.lanes.ray.lane import RayLane


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    lane = RayLane.__new__(RayLane)  # the conversion alone: no actors
    lane.pin_memory, lane.name = False, "ray"
    from concurrent.futures import ThreadPoolExecutor

    lane._converters = ThreadPoolExecutor(1, thread_name_prefix="hybridload-ray-convert")
    images = np.random.default_rng(0).integers(0, 255, (args.batch, 3, args.size, args.size), dtype=np.uint8)
    raw = (images, np.arange(args.batch), np.arange(args.batch), [], 0.1)
    before, now = [], []
    for _ in range(args.rounds):  # interleaved
        t0 = time.perf_counter()
        lane.to_batch(raw)
        before.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        fut = lane._converters.submit(lane.to_batch, lane.convert(raw).raw)
        now.append(time.perf_counter() - t0)
        fut.result()
    lane._converters.shutdown()
    b, n = statistics.median(before) * 1e3, statistics.median(now) * 1e3
    print(
        f"batch {args.batch} x 3 x {args.size} x {args.size} uint8 ({images.nbytes / 2**20:.1f} MiB), "
        f"{args.rounds} rounds: Ray's callback thread held {b:.3f} ms a batch before (the copy), "
        f"{n:.3f} ms now (median): {b / n:.0f}x less"
    )


if __name__ == "__main__":
    main()
