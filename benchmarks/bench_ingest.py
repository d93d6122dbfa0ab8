#!/usr/bin/env python
"""The trainer's ingest ceiling: how fast the driver receives decoded batches from a remote actor.

A simulated two-node cluster (``ray.cluster_utils.Cluster``, 1-CPU head and worker on
127.0.0.1, 300 MB stores); an actor on the worker returns a uint8 (64, 3, 224, 224) array per
call. Contestants (method: _harness.py), ``--ingest-batches`` per round, same number in flight:
``hybridload ActorPool`` (placement "remote-first", the loader's scheduler and ordered merger,
copied into a torch buffer as the Ray lane does), ``raw ray.get`` and ``raw ray.get + copy``.
Reported: batches/s and GB/s per path and the paired ratios.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import deque

import numpy as np
import torch

import _harness as h
from _data import check_ray_loopback, loopback_cluster, parser
from hybridload.lanes._base import BatchTask
from hybridload.raycluster import PlacementRules
from hybridload.lanes._ray import ActorPool, PoolConfig
from hybridload.execution._stats import LoaderStats
from hybridload.execution._stream import BatchStream

log = logging.getLogger("bench_ingest")
BATCH = 64


class Producer:
    """The actor: returns the same pre-made batch array on every call."""

    def __init__(self, shape):
        self.batch = np.full(tuple(shape), 7, np.uint8)

    def ready(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def produce(self) -> np.ndarray:
        return self.batch


def copy_out(raw: np.ndarray) -> torch.Tensor:
    """One copy out of the (read-only) object store into a torch buffer, as the Ray lane's convert."""
    buf = torch.empty(raw.shape, dtype=torch.uint8)
    np.copyto(buf.numpy(), raw)
    return buf


class IngestPool(ActorPool):
    """hybridload's ActorPool with a Producer actor; it copies each batch out as the Ray lane does."""

    name = "ingest"

    def call(self, actor, task):
        return actor.produce.remote()

    convert = staticmethod(copy_out)


def drive(pool, batches: int) -> int:
    """``batches`` tasks through the pool in order, as the loader drives a lane; returns the images."""
    work = [BatchTask(k, 0, np.arange(BATCH, dtype=np.int64), size=BATCH) for k in range(batches)]
    with BatchStream([pool], work, hooks=LoaderStats()) as stream:
        return sum(result.shape[0] // BATCH for result in stream) * BATCH


def raw_get(ray, actor, batches: int, inflight: int, copy: bool) -> int:
    """ray.get in a loop, ``inflight`` calls outstanding (with ``copy``, the Ray lane's copy); the images."""
    refs = deque(actor.produce.remote() for _ in range(min(inflight, batches)))
    for submitted in range(len(refs), len(refs) + batches):
        arr = ray.get(refs.popleft())
        if submitted < batches:
            refs.append(actor.produce.remote())
        if copy:
            copy_out(arr)
        del arr  # release the object before the next get
    return batches * BATCH


def measure(size: int = 224, store_mb: int = 300, inflight: int = 2, batches: int = 100, rounds: int = 5) -> dict:
    """The three paths on a fresh 2-node loopback cluster: {results, ratios, info, ...}."""
    import ray

    shape, t0 = (BATCH, 3, size, size), time.perf_counter()
    nbytes, info = int(np.prod(shape)), {}
    with loopback_cluster(store_mb=store_mb, connect=False) as (cl, _nodes):
        pool = IngestPool(
            Producer,
            (shape,),
            PoolConfig(
                rules=PlacementRules(reserve_local_cpus=1, cpu_actors=1),
                ray_address=cl.address,
                tasks_per_actor=inflight,
                on_no_actors="raise",
            ),
        )
        try:
            info["nodes"] = check_ray_loopback(ray)
            if pool.nodes[0] == ray.get_runtime_context().get_node_id():
                raise RuntimeError("the producer actor landed on the driver's node; the ingest test needs it remote")
            log.info(
                "2-node cluster on %s up in %.1f s; producer on the worker node; %d in flight, %.1f MB per batch",
                info["nodes"],
                time.perf_counter() - t0,
                pool.slots,
                nbytes / 1e6,
            )
            actor = pool.actors[0]
            cs = [
                h.Contestant("hybridload ActorPool", lambda _e: drive(pool, batches)),
                h.Contestant("raw ray.get", lambda _e: raw_get(ray, actor, batches, inflight, False)),
                h.Contestant("raw ray.get + copy", lambda _e: raw_get(ray, actor, batches, inflight, True)),
            ]
            h.warm_up(cs, log=log)
            per_round = h.run_rounds(cs, rounds, 0, expect=batches * BATCH, log=log, label="ingest ")
        finally:
            pool.close()  # kills the actor, releases hybridload's connection
    results = h.summarize_all(per_round, cs)
    for r in results.values():
        for k in ("median", "min", "max"):
            r[f"{k}_batches_per_s"] = r[f"{k}_images_per_s"] / BATCH
        r["median_gb_per_s"] = r["median_batches_per_s"] * nbytes / 1e9
    pooled, raw, copied = (c.name for c in cs)
    ratios = {f"{a} / {b}": h.ratio(results, a, b) for a, b in ((pooled, raw), (pooled, copied), (copied, raw))}
    return {
        "batch_shape": list(shape),
        "batch_bytes": nbytes,
        "inflight": inflight,
        "batches_per_round": batches,
        "object_store_mb": store_mb,
        "info": info,
        "results": results,
        "ratios": ratios,
    }


def main(argv=None) -> int:
    ap = parser(__doc__, quick=dict(ingest_batches=10, rounds=1), ingest_batches=100, ingest_store_mb=300)
    ap.add_argument("--size", type=int, default=224, help="image side of the batches")
    ap.add_argument("--ingest-inflight", type=int, default=2, help="calls in flight (ActorPool tasks_per_actor)")
    args = ap.parse_args(argv)
    env = h.environment()
    res = measure(args.size, args.ingest_store_mb, args.ingest_inflight, args.ingest_batches, args.rounds)
    lines = [
        f"## bench_ingest: 2-node loopback cluster, one producer actor on the worker node, "
        f"{res['batch_bytes'] / 1e6:.1f} MB uint8 batches {tuple(res['batch_shape'])}, {res['inflight']} in "
        f"flight, {res['batches_per_round']} batches per round, {args.rounds} interleaved rounds\n",
        h.environment_line(env),
        *h.results_table(
            res["results"],
            (
                ("median batches/s", lambda r: f"{r['median_batches_per_s']:.1f}"),
                ("min", lambda r: f"{r['min_batches_per_s']:.1f}"),
                ("max", lambda r: f"{r['max_batches_per_s']:.1f}"),
                ("median GB/s", lambda r: f"{r['median_gb_per_s']:.2f}"),
                "other",
            ),
            first="path",
        ),
        "",
        *h.ratio_table(res["ratios"]),
        "",
    ]
    h.emit(lines, args, {"benchmark": "bench_ingest", "environment": env, "ingest": res}, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
