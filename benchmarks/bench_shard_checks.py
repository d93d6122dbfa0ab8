"""What TarShards' integrity checks cost, side by side in one run.

* A sample read with its 512-byte tar header and checked against it (``TarShards.read``)
  against the unchecked ranged read of the same bytes (locate, one ranged read, retried: the
  read before the check), over the same page-cached shards, rounds interleaved.
* ``fingerprint()`` of a manifest-sized ``ShardList`` of 10^6 shards (what a state records).

Usage: ``python benchmarks/bench_shard_checks.py [--quick] [--out DIR]``; shards of demo
photos are written to ``DIR`` (default: a temporary directory).
"""

from __future__ import annotations

import argparse
import io
import os
import tarfile
import tempfile
import time


def make_shards(out: str, photos: int) -> list[str]:
    """Three shards of demo photos (``k<s>_<i>.jpg``) in ``out``."""
    from hybridload.cli.demo_data import make_photo_folder

    root = make_photo_folder(os.path.join(out, "photos"), photos, num_classes=3, seed=1)
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".jpg"))
    per, shards = len(files) // 3, []
    for s in range(3):
        shards.append(os.path.join(out, f"shard-{s}.tar"))
        with tarfile.open(shards[-1], "w") as tf:
            for i, p in enumerate(files[per * s : per * (s + 1)]):
                data = open(p, "rb").read()
                info = tarfile.TarInfo(f"k{s}_{i}.jpg")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return shards


def main(argv=None) -> None:
    from hybridload import sources
    from hybridload.sources._base import read_bytes
    from hybridload.sources.read_retry import with_retries
    from hybridload.sources.tar.shard_list import ShardList

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: few photos, 3 rounds, 10^4 shards")
    ap.add_argument("--out", default=None, help="where to write the shards (default: a temporary directory)")
    args = ap.parse_args(argv)
    photos, rounds, shards = (30, 3, 10**4) if args.quick else (300, 15, 10**6)
    out = args.out or tempfile.mkdtemp(prefix="bench-shard-checks-")
    src = sources.TarShards(make_shards(out, photos))
    refs = [src.ref(i) for i in range(len(src))]

    def unchecked():
        for r in refs:
            url, off, size = src.span(r.index)
            data = with_retries(
                lambda: read_bytes(url, src.storage_options, offset=off, size=size), src.read_retry, r.location
            )
            assert len(data) == size

    def checked():
        for r in refs:
            src.read(r)

    times: dict[str, list[float]] = {"unchecked": [], "checked": []}
    for k in range(rounds):
        pair = (("unchecked", unchecked), ("checked", checked))
        for name, fn in pair if k % 2 == 0 else pair[::-1]:
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    print(
        f"{len(refs)} reads per round, {rounds} rounds interleaved (median): unchecked {len(refs) / med['unchecked']:.0f}"
        f"/s, checked {len(refs) / med['checked']:.0f}/s; checked/unchecked time {med['checked'] / med['unchecked']:.2f}"
    )
    lst = ShardList([f"s3://bucket/train/{s // 1000:03d}/shard-{s:07d}.tar" for s in range(shards)], [1000] * shards)
    t0 = time.perf_counter()
    fp = lst.fingerprint()
    print(f"fingerprint of {shards} shards: {time.perf_counter() - t0:.2f} s ({fp})")


if __name__ == "__main__":
    main()
