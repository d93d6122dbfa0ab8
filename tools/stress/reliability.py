"""Reliability report: faults injected on a simulated 3-node loopback cluster, bad inputs per
lane, memory over 50 epochs. Every fault run is compared with a fault-free run: batches lost and
duplicates delivered must be 0, the stream identical.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from unittest import mock

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / d) for d in ("benchmarks", "tests")]  # the harness; support/

import _harness as h
from _data import loopback_cluster, parser
from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.cli.demo_data import make_photo_folder
from hybridload.errors import SampleError
from hybridload.lanes._gpu.dali import DaliLane
from support.bad_files import make_bad_files
from support.readings import rss_mb, store_used_mb

log = logging.getLogger("reliability")
REC = recipe.imagenet_train(64)
BS = 4
BAD_KINDS = ("truncated", "zero", "text", "png", "gray", "cmyk", "gray16", "huge", "missing")


def run(src, policy, fault=None, epochs=(0, 1)):
    """(each batch's (indices, md5 of its pixels), stats, max gap after the fault in seconds)."""
    got, gap, t_fault, t_last = [], 0.0, None, None
    with HybridLoader(src, REC, BS, seed=1, return_indices=True, policy=policy) as ld:
        for e in epochs:
            ld.set_epoch(e)
            for images, _labels, idx in ld:
                got.append((tuple(idx.tolist()), hashlib.md5(images.numpy().tobytes()).hexdigest()))
                now = time.monotonic()
                if t_fault is not None and t_last is not None:
                    gap = max(gap, now - t_last)
                t_last = now
                if fault is not None and len(got) == fault[0]:
                    fault[1](ld)
                    t_fault = now
        stats = ld.stats()
    return got, stats, gap


def row(name, ref, got, stats, gap, pixels: bool = True):
    """The fault's row against the fault-free run ``ref``; ``pixels=False``: compare the indices only."""
    want, have = Counter(r[0] for r in ref), Counter(g[0] for g in got)
    same = got == ref if pixels else [g[0] for g in got] == [r[0] for r in ref]
    return {
        "fault": name,
        "batches": len(got),
        "retried": stats["retries"],
        "reissued": stats["reissued"],
        "lost": sum((want - have).values()),
        "duplicates_delivered": sum((have - want).values()),
        "stream_identical": same,
        "max_gap_after_fault_s": round(gap, 2),
    }


def faults(root, cluster):
    import ray

    src = sources.ImageFolder(root)
    ref, _, _ = run(src, LoaderPolicy(cpu_actors=0, threads=2))
    rows = []
    ray_policy = LoaderPolicy(ray_address="embedded", cpu_actors=3, reserve_local_cpus=1, batch_timeout_s=90)

    def kill_busiest(ld):
        ray.kill(max(ld._lanes[0].members(), key=lambda m: m.load).handle, no_restart=True)

    for point in range(1, 11):
        rows.append(row(f"actor killed after batch {point * 2}", ref, *run(src, ray_policy, (point * 2, kill_busiest))))
        log.info("%s", rows[-1])

    extra = cluster.add_node(num_cpus=1, object_store_memory=150 << 20, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes(timeout=60)

    def remove(ld):
        cluster.remove_node(extra, allow_graceful=False)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(n["NodeID"] == extra.node_id and n["Alive"] for n in ray.nodes()):
            time.sleep(0.2)

    ray_policy = dataclasses.replace(ray_policy, reserve_local_cpus=2)
    rows.append(row("node removed after batch 4", ref, *run(src, ray_policy, (4, remove))))

    real, calls = DaliLane.run_batch, {"n": 0}

    def flaky(self, task):
        calls["n"] += 1
        if calls["n"] > 3:
            raise RuntimeError("injected GPU lane failure")
        return real(self, task)

    with mock.patch.object(DaliLane, "run_batch", flaky):
        for policy, how in (
            (LoaderPolicy(mode="gpu"), "mode gpu"),
            (
                LoaderPolicy(ray_address="embedded", mode="split", gpu_share=0.6, cpu_actors=2, reserve_local_cpus=1),
                "split + Ray",
            ),
        ):
            calls["n"] = 0  # DALI's pixels differ by rounding: compare the indices
            rows.append(row(f"GPU lane raises from its 4th batch ({how})", ref, *run(src, policy), pixels=False))
    return rows


def bad_inputs(root, tmp, ray_lane: bool = True):
    rows, paths0 = [], sources.ImageFolder(root).paths[:8]
    files = make_bad_files(os.path.join(tmp, "bad"), paths0[0])
    lanes = {
        "in-process": LoaderPolicy(cpu_actors=0),
        **({"ray": LoaderPolicy(ray_address="embedded", cpu_actors=2, reserve_local_cpus=1)} if ray_lane else {}),
        "gpu (DALI CPU-only)": LoaderPolicy(mode="gpu"),
    }
    for kind in BAD_KINDS:
        r = {"input": kind}
        for lane, policy in lanes.items():
            paths = [*paths0[:5], files[kind], *paths0[6:]]
            try:
                with HybridLoader(sources.FileList(paths, list(range(8))), REC, 2, shuffle=False, policy=policy) as ld:
                    list(ld)
                r[lane] = "decoded"
            except SampleError as exc:
                r[lane] = f"SampleError: index {exc.index}, stage {exc.stage}"
        rows.append(r)
    return rows


def memory(root):
    out = {}
    with HybridLoader(
        sources.ImageFolder(root),
        REC,
        16,
        policy=LoaderPolicy(ray_address="embedded", cpu_actors=2, reserve_local_cpus=1),
    ) as ld:
        for epoch in range(50):
            ld.set_epoch(epoch)
            for _ in ld:
                pass
            if epoch in (0, 49):
                gc.collect()
                time.sleep(1.0)
                out[epoch + 1] = {
                    "rss_mb": round(rss_mb(), 1),
                    "object_store_mb": store_used_mb(),
                    "actors": ld._lanes[0].parallelism,
                }
    return out


def main(argv=None) -> int:
    ap = parser(__doc__, photos=False, quick="bad inputs in the in-process and GPU lanes only")
    ap.add_argument("--n", type=int, default=60)
    args = ap.parse_args(argv)
    logging.getLogger("hybridload").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        root = str(make_photo_folder(os.path.join(tmp, "photos"), args.n, num_classes=3))
        if args.quick:  # no cluster: the in-process and GPU lanes only
            report = {"bad_inputs": bad_inputs(root, tmp, ray_lane=False)}
        else:
            with loopback_cluster(head_cpus=2, worker_cpus=1, workers=2, store_mb=150) as (cluster, _w):
                report = {"faults": faults(root, cluster), "bad_inputs": bad_inputs(root, tmp), "memory": memory(root)}
    titles = {
        "faults": "Faults",
        "bad_inputs": "Bad inputs per lane",
        "memory": "Memory, 50 epochs (Ray lane, 2 actors)",
    }
    rows = {k: [{"epoch": e, **v} for e, v in r.items()] if k == "memory" else r for k, r in report.items()}
    tables = {k: h.markdown_table(list(r[0]), [[x.get(c, "") for c in r[0]] for x in r]) for k, r in rows.items()}
    h.emit(
        [f"### {titles[k]}\n\n" + "\n".join(tables[k]) + "\n" for k in titles if k in rows],
        args,
        {"benchmark": "reliability", **report},
        log,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
