"""A scale-out model: predicted images/s for 1 to 64 worker nodes, and where a ceiling bites.

    predicted(nodes) = min(nodes x cores x per_core_rate,          # the CPUs
                           ingest_batches_per_s x batch_size,      # what the trainer can receive
                           network_bytes_per_s / bytes_per_image)  # the trainer's NIC

Inputs measured here: the kernels' per-core rate (one thread, this run) and the trainer's
ingest ceiling (hybridload's ActorPool receiving 64x3x224x224 uint8 batches from another
simulated node: out/bench-ray-lane.json from `python benchmarks/bench_ray_lane.py --out ...`,
or --ingest-batches-per-s). Assumed: the NIC bandwidth (--network-gbit, default 25) and cores
per node (--cores, default 32). Checked against the simulated cluster with 1 and 2 one-CPU
worker nodes (loopback); on a 2-core machine the simulated nodes share the same cores, so the
check means little beyond 2 CPUs in total, which is where it stops.

    python benchmarks/scaleout_model.py [--out out/scaleout.json] [--plot out/scaleout.png]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_PHOTO_ROOT, photo_set, ray_loopback_env, setup_logging  # noqa: E402

ray_loopback_env()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from hybridload import HybridLoader, LoaderPolicy, kernels, recipe, sources  # noqa: E402

log = logging.getLogger("scaleout_model")
BATCH = 64
BYTES_PER_IMAGE = 3 * 224 * 224


def per_core_rate(source, rec, seconds: float = 4.0) -> float:
    torch.set_num_threads(1)
    idx = np.arange(len(source))
    kernels.process_batch(source, rec, idx[:16], 0, 0)
    n, t0, k = 0, time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        batch = idx[(k * 16) % len(idx):][:16]
        n += len(kernels.process_batch(source, rec, batch, 0, 0).indices)
        k += 1
    return n / (time.perf_counter() - t0)


def predict(nodes: int, cores: int, per_core: float, ingest_img_s: float, net_img_s: float) -> tuple[float, str]:
    parts = {"CPUs": nodes * cores * per_core, "trainer ingest": ingest_img_s, "network": net_img_s}
    which = min(parts, key=parts.get)
    return parts[which], which


def measured_on_simulated_cluster(folder, workers: int, seconds: float = 6.0) -> float:
    import ray
    from ray.cluster_utils import Cluster
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "node_ip_address": "127.0.0.1",
                                                            "object_store_memory": 200 << 20})
    try:
        for _ in range(workers):
            cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1", object_store_memory=200 << 20)
        cluster.wait_for_nodes(timeout=60)
        ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
        policy = LoaderPolicy(cpu_actors=workers, reserve_local_cpus=1, placement="remote-first")
        with HybridLoader(sources.ImageFolder(folder), recipe.imagenet_train(224), BATCH, policy=policy) as ld:
            it, n, t0, epoch = iter(ld), 0, None, 0
            while True:
                try:
                    images, _ = next(it)
                except StopIteration:
                    epoch += 1
                    ld.set_epoch(epoch)
                    it = iter(ld)
                    continue
                if t0 is None:
                    t0 = time.perf_counter()
                    continue
                n += images.shape[0]
                if time.perf_counter() - t0 > seconds:
                    return n / (time.perf_counter() - t0)
    finally:
        ray.shutdown()
        cluster.shutdown()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=DEFAULT_PHOTO_ROOT)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--cores", type=int, default=32)
    ap.add_argument("--network-gbit", type=float, default=25.0)
    ap.add_argument("--ingest-json", type=Path, default=Path("out/bench-ray-lane.json"))
    ap.add_argument("--ingest-batches-per-s", type=float, default=None)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--plot", default=None)
    args = ap.parse_args(argv)
    setup_logging()
    folder = photo_set(args.root, args.n, log)
    source, rec = sources.ImageFolder(folder), recipe.imagenet_train(224)
    per_core = per_core_rate(source, rec)
    ingest_bps = args.ingest_batches_per_s
    if ingest_bps is None:
        data = json.loads(args.ingest_json.read_text())
        ingest_bps = data["ingest"]["results"]["hybridload ActorPool"]["median_batches_per_s"]
    ingest_img_s = ingest_bps * BATCH
    net_img_s = args.network_gbit * 1e9 / 8 / BYTES_PER_IMAGE
    rows = []
    for nodes in (1, 2, 4, 8, 16, 32, 64):
        pred, which = predict(nodes, args.cores, per_core, ingest_img_s, net_img_s)
        rows.append({"nodes": nodes, "predicted_images_per_s": round(pred), "limited_by": which})
    checks = []
    if not args.no_check:
        for w in (1, 2):
            got = measured_on_simulated_cluster(folder, w)
            pred, which = predict(w, 1, per_core, ingest_img_s, net_img_s)
            checks.append({"worker_nodes": w, "measured": round(got), "model": round(pred), "ratio": round(got / pred, 2)})
            log.info("simulated cluster, %d one-CPU worker node(s): measured %.0f, model %.0f", w, got, pred)
    lines = [f"## scale-out model: {args.cores} cores per node at {per_core:.0f} images/s per core (measured), "
             f"trainer ingest {ingest_bps:.1f} batches/s = {ingest_img_s:.0f} images/s (measured, loopback), "
             f"NIC {args.network_gbit:g} Gbit/s = {net_img_s:.0f} images/s of uint8 224x224 (assumed)", "",
             "| worker nodes | predicted images/s | limited by |", "| ---: | ---: | --- |"]
    lines += [f"| {r['nodes']} | {r['predicted_images_per_s']} | {r['limited_by']} |" for r in rows]
    if checks:
        lines += ["", "| simulated worker nodes (1 CPU each) | measured | model | measured / model |",
                  "| ---: | ---: | ---: | ---: |"]
        lines += [f"| {c['worker_nodes']} | {c['measured']} | {c['model']} | {c['ratio']} |" for c in checks]
    sys.stdout.write("\n".join(lines) + "\n")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"per_core": per_core, "ingest_batches_per_s": ingest_bps, "rows": rows, "checks": checks}, f,
                      indent=2)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        xs = list(range(1, 65))
        fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
        ax.plot(xs, [x * args.cores * per_core for x in xs], ls="--", color="tab:blue", label="CPUs alone")
        ax.axhline(ingest_img_s, ls=":", color="tab:red", label="trainer ingest (measured)")
        ax.axhline(net_img_s, ls=":", color="tab:purple", label=f"NIC {args.network_gbit:g} Gbit/s")
        ax.plot(xs, [predict(x, args.cores, per_core, ingest_img_s, net_img_s)[0] for x in xs], color="black",
                lw=2, label="predicted")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("worker nodes")
        ax.set_ylabel("images/s")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(args.plot)
        plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
