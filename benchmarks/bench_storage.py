#!/usr/bin/env python
"""Reading from slow storage: concurrent reads and shard streaming against per-sample reads.

The photo set is copied into fsspec's memory:// store and read back through ``latencymem://``
(`SlowMemory` below), which sleeps ``--latency-ms`` before every request, as a round trip to
object storage would. Every contestant is a ``HybridLoader`` (in-process lane, one thread per
usable core, batch ``--batch-size``, imagenet_train at ``--size``) over the same images, built
afresh before each round (untimed), so no shard stays cached from one round to the next:

* ``no latency``: ImageFolder over memory:// (the ceiling: decode-bound);
* ``folder, sequential reads``: ImageFolder over latencymem://, ``io_threads=1`` (one request
  after another, as before concurrent reads);
* ``folder, concurrent reads``: the same with the default ``io_threads`` (32 in flight);
* ``tar, sequential reads``: TarShards (``--shard-size`` samples per shard), one ranged read
  per sample, ``io_threads=1``;
* ``tar, shard streaming``: TarShards ``read="shard"`` (one whole-object read per shard,
  ``--buffer-shards`` shards shuffled together).

Goals (issue 15): concurrent reads >= 0.8x the images/s without latency; shard streaming >=
3x sequential per-sample reads. Each round also records the requests the slow store served.

Run:  python benchmarks/bench_storage.py [--n 512] [--rounds 3] [--out out/bench-storage.json] [--quick]
"""

from __future__ import annotations

import io
import logging
import sys
import tarfile
import threading
import time
import uuid

import fsspec
from fsspec.implementations.memory import MemoryFileSystem

import _harness as h
from _data import parser, photo_source
from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload._policy import usable_cpus

log = logging.getLogger("bench_storage")
GOALS = {"folder, concurrent reads / no latency": 0.8, "tar, shard streaming / tar, sequential reads": 3.0}


class SlowMemory(MemoryFileSystem):
    """``memory://`` read as ``latencymem://``: ``latency_s`` slept before each request (``cat_file``,
    ``open``), the process's requests counted. The tests' slow store, ``slowmem://`` with bounds
    checks and more counters, is tests/support/slowfs.py (benchmarks/ runs without the test tree);
    a protocol of its own, so that importing this script leaves theirs registered."""

    protocol = "latencymem"
    _lock = threading.Lock()
    requests = 0

    def __init__(self, latency_s: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.latency_s = latency_s

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, str) and path.startswith("latencymem://"):
            path = "memory://" + path[len("latencymem://") :]
        return super()._strip_protocol(path)

    def _request(self, fn, *args, **kwargs):
        with self._lock:
            SlowMemory.requests += 1
        time.sleep(self.latency_s)
        return fn(*args, **kwargs)

    def cat_file(self, path, start=None, end=None, **kwargs):
        return self._request(super().cat_file, path, start=start, end=end, **kwargs)

    def _open(self, path, mode="rb", **kwargs):
        return self._request(super()._open, path, mode=mode, **kwargs)


fsspec.register_implementation("latencymem", SlowMemory, clobber=True)


def to_memory(folder: sources.ImageFolder, shard_size: int) -> str:
    """The photos as a folder tree and as tar shards in memory://; the base path."""
    base, mem = f"/bench-storage-{uuid.uuid4().hex[:8]}", fsspec.filesystem("memory")
    for i in range(len(folder)):
        ref = folder.ref(i)
        rel = ref.location[len(folder.root) + 1 :]
        mem.pipe_file(f"{base}/folder/{rel}", folder.read(ref)[0])
    for s in range(0, len(folder), shard_size):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for i in range(s, min(s + shard_size, len(folder))):
                for name, data in (
                    (f"{i:07d}.jpg", folder.read(folder.ref(i))[0]),
                    (f"{i:07d}.cls", str(folder.ref(i).label).encode()),
                ):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
        mem.pipe_file(f"{base}/shards/{s // shard_size:05d}.tar", buf.getvalue())
    return base


class Reader(h.Contestant):
    """A HybridLoader over a source made by ``make()``, rebuilt before each round."""

    def __init__(self, name: str, make, batch_size: int, size: int):
        self.name, self.make, self.batch_size = name, make, batch_size
        self.rec, self.threads, self.loader = recipe.imagenet_train(size), usable_cpus(), None

    def prepare(self) -> None:
        self.close()
        self.loader = HybridLoader(
            self.make(),
            self.rec,
            self.batch_size,
            seed=0,
            device="cpu",
            policy=LoaderPolicy(cpu_actors=0, threads=self.threads),
        )
        SlowMemory.requests = 0

    def run(self, epoch: int) -> dict:
        self.loader.set_epoch(epoch)
        images = sum(len(labels) for _images, labels in self.loader)
        return {"images": images, "storage_requests": SlowMemory.requests}

    def close(self) -> None:
        if self.loader is not None:
            self.loader.close()
            self.loader = None


def contestants(base: str, n_shards: int, args) -> list[Reader]:
    slow = {"latency_s": args.latency_ms / 1000}
    tars = f"latencymem://{base}/shards/{{00000..{n_shards - 1:05d}}}.tar"
    makes = {
        "no latency": lambda: sources.ImageFolder(f"memory://{base}/folder"),
        "folder, sequential reads": lambda: sources.ImageFolder(
            f"latencymem://{base}/folder", storage_options=slow, io_threads=1
        ),
        "folder, concurrent reads": lambda: sources.ImageFolder(f"latencymem://{base}/folder", storage_options=slow),
        "tar, sequential reads": lambda: sources.TarShards(tars, storage_options=slow, io_threads=1),
        "tar, shard streaming": lambda: sources.TarShards(
            tars, storage_options=slow, read="shard", buffer_shards=args.buffer_shards
        ),
    }
    return [Reader(name, make, args.batch_size, args.size) for name, make in makes.items()]


def main(argv=None) -> int:
    ap = parser(
        __doc__, n=512, rounds=3, quick=dict(n=96, rounds=1, warmup_rounds=0, shard_size=16), batch_size=32, size=224
    )
    ap.add_argument("--latency-ms", type=float, default=20.0, help="sleep before every storage request")
    ap.add_argument("--shard-size", type=int, default=32, help="samples per tar shard")
    ap.add_argument("--buffer-shards", type=int, default=4, help="shards shuffled together (shard streaming)")
    args = ap.parse_args(argv)
    env = h.environment()
    _root, folder = photo_source(args.root, args.n, log)
    base = to_memory(folder, args.shard_size)
    n_shards = -(-args.n // args.shard_size)
    cs = contestants(base, n_shards, args)
    try:
        per_round = h.run_rounds(cs, args.rounds, args.warmup_rounds, expect=args.n, log=log)
    finally:
        h.close_all(cs, log)
        fsspec.filesystem("memory").rm(base, recursive=True)
    results = h.summarize_all(per_round, cs)
    pairs = [
        ("folder, concurrent reads", "no latency"),
        ("tar, shard streaming", "tar, sequential reads"),
        ("folder, concurrent reads", "folder, sequential reads"),
        ("tar, shard streaming", "no latency"),
    ]
    ratios = {f"{a} / {b}": h.ratio(results, a, b) for a, b in pairs}
    requests = ("requests per round", lambda r: r["rounds"][-1].get("storage_requests", "n/a"))
    lines = [
        f"#### bench_storage: {args.n} photo JPEGs, imagenet_train({args.size}), batch {args.batch_size}, "
        f"{args.latency_ms:g} ms per request, shards of {args.shard_size}, buffer_shards {args.buffer_shards}, "
        f"{args.rounds} interleaved rounds (after {args.warmup_rounds} untimed)",
        "",
        h.environment_line(env),
        *h.results_table(results, ("threads", "median", "min", "max", "cpu", requests, "other", "contended")),
        "",
        *h.ratio_table(ratios, GOALS),
        "",
    ]
    h.emit(
        lines,
        args,
        {
            "benchmark": "bench_storage",
            "environment": env,
            "results": results,
            "ratios": ratios,
            "goals": h.goals_met(ratios, GOALS),
        },
        log,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
