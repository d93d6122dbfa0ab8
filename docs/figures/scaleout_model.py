"""A scale-out model: predicted images/s for 1 to 64 worker nodes, and where a ceiling bites.

    predicted(nodes) = min(nodes x cores x per_core_rate,          # the CPUs
                           ingest_batches_per_s x batch_size,      # what the trainer can receive
                           network_bytes_per_s / bytes_per_image)  # the trainer's NIC

Measured here: the kernels' per-core rate (process_batch, one thread), the bytes per batch
(64x3x224x224 uint8) and the trainer's ingest ceiling (batches/s the ActorPool receives from an
actor on another simulated node: bench_ingest.py in this run, unless --ingest-json names its JSON
or --ingest-batches-per-s gives it). Assumed: NIC bandwidth (--network-gbit, 25) and cores per
node (--cores, 32). Checked against a simulated loopback cluster (a 1-CPU head kept for the
trainer, reserve_local_cpus=1, plus 1 or 2 one-CPU worker nodes, remote-first): measured Ray-lane
images/s against the model with C=1; on 2 cores that means something at 1 worker node only.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # the harness and the photo set

import _harness as h
from _data import check_ray_loopback, loopback_cluster, parser, photo_source
from bench_ingest import BATCH, measure as measure_ingest
from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.sampling._epochs import endless
from hybridload.planner._rates import cpu_rate_per_core

log = logging.getLogger("scaleout_model")
BYTES_PER_IMAGE = 3 * 224 * 224


def predict(nodes: int, cores: int, per_core: float, ingest_img_s: float, net_img_s: float) -> tuple[float, str]:
    parts = {"CPUs": nodes * cores * per_core, "trainer ingest": ingest_img_s, "network": net_img_s}
    which = min(parts, key=parts.get)
    return parts[which], which


def check_on_simulated_cluster(folder, workers: int, model: tuple[float, str], seconds: float = 6.0) -> dict:
    """The Ray lane's images/s on a loopback cluster of ``workers`` one-CPU worker nodes, against
    the model's (images/s, limited by) for them."""
    import ray

    with loopback_cluster(head_cpus=1, workers=workers, store_mb=200):
        nodes = check_ray_loopback(ray)
        policy = LoaderPolicy(
            ray_address="embedded", cpu_actors=workers, reserve_local_cpus=1, placement="remote-first"
        )
        with HybridLoader(
            sources.ImageFolder(folder), recipe.imagenet_train(224), BATCH, policy=policy, device="cpu"
        ) as ld:
            batches = endless(ld)
            for _ in range(2):  # actors up, first batches through: untimed
                next(batches)

            def run() -> int:
                n, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < seconds:
                    n += next(batches)[0].shape[0]
                return n

            r = h.timed(run)
            driver = ray.get_runtime_context().get_node_id()
            actor_nodes = [n for lane in ld._lanes for n in getattr(lane, "nodes", [])]
    log.info(
        "simulated cluster, %d one-CPU worker node(s): measured %.0f, model %.0f", workers, r["images_per_s"], model[0]
    )
    return {
        "worker_nodes": workers,
        "measured": round(r["images_per_s"]),
        "model": round(model[0]),
        "model_limited_by": model[1],
        "ratio": round(r["images_per_s"] / model[0], 2),
        "other_load": r["other_load"],
        "actors": len(actor_nodes),
        "actors_on_driver_node": sum(n == driver for n in actor_nodes),
        "nodes": nodes,
    }


def main(argv=None) -> int:
    ap = parser(
        __doc__,
        n=512,
        rounds=3,
        quick=dict(n=64, per_core_seconds=1.0, check_seconds=2.0, ingest_batches=10, rounds=1),
        ingest_batches=100,
        ingest_store_mb=300,
        plot=None,
    )
    ap.add_argument("--cores", type=int, default=32, help="cores per worker node (C)")
    ap.add_argument("--network-gbit", type=float, default=25.0, help="assumed NIC bandwidth of the trainer's node")
    ap.add_argument(
        "--ingest-json",
        type=Path,
        default=None,
        help="take the ingest ceiling from bench_ingest.py's JSON instead of measuring it",
    )
    ap.add_argument("--ingest-batches-per-s", type=float, default=None, help="or give the ingest ceiling")
    ap.add_argument("--per-core-seconds", type=float, default=4.0)
    ap.add_argument("--check-seconds", type=float, default=6.0, help="timed seconds per simulated-cluster check")
    ap.add_argument("--no-check", action="store_true", help="skip the check on the simulated cluster")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    folder, source = photo_source(args.root, args.n, log)
    per_core = cpu_rate_per_core(
        source, recipe.imagenet_train(224), range(len(source)), args.per_core_seconds, batch=16
    )
    log.info("per-core kernel rate: %.0f images/s", per_core)
    ingest_bps, ingest_src, ingest_doc = args.ingest_batches_per_s, "given", None
    if ingest_bps is None:
        if args.ingest_json is not None:
            ingest, ingest_src = json.loads(args.ingest_json.read_text())["ingest"], f"from {args.ingest_json}"
        else:
            ingest = ingest_doc = measure_ingest(224, args.ingest_store_mb, 2, args.ingest_batches, args.rounds)
            ingest_src = "measured in this run"
        ingest_bps = ingest["results"]["hybridload ActorPool"]["median_batches_per_s"]
    ingest_img_s = ingest_bps * BATCH
    batch_bytes = BATCH * BYTES_PER_IMAGE
    net_img_s = args.network_gbit * 1e9 / 8 / BYTES_PER_IMAGE
    rows = []
    for nodes in (1, 2, 4, 8, 16, 32, 64):
        pred, which = predict(nodes, args.cores, per_core, ingest_img_s, net_img_s)
        rows.append(
            {
                "nodes": nodes,
                "cpu_images_per_s": round(nodes * args.cores * per_core),
                "predicted_images_per_s": round(pred),
                "limited_by": which,
            }
        )
    checks = (
        []
        if args.no_check
        else [
            check_on_simulated_cluster(folder, w, predict(w, 1, per_core, ingest_img_s, net_img_s), args.check_seconds)
            for w in ((1,) if args.quick else (1, 2))
        ]
    )
    lines = [
        f"## scale-out model: C = {args.cores} cores per worker node at {per_core:.0f} images/s per core "
        f"(measured, 1 thread); batch {BATCH}x3x224x224 uint8 = {batch_bytes / 1e6:.1f} MB; trainer ingest "
        f"{ingest_bps:.1f} batches/s = {ingest_img_s:.0f} images/s = {ingest_bps * batch_bytes / 1e9:.2f} GB/s "
        f"({ingest_src}, loopback); NIC {args.network_gbit:g} Gbit/s = {net_img_s:.0f} images/s (assumed)",
        "",
        *h.markdown_table(
            ["worker nodes", "CPUs alone", "predicted images/s", "limited by"], [list(r.values()) for r in rows]
        ),
    ]
    knee, fnc = args.cores * per_core, next((r for r in rows if r["limited_by"] != "CPUs"), None)
    where = (
        "up to 64 nodes; no other ceiling bites."
        if fnc is None
        else f"from {'1 node' if fnc['nodes'] == 1 else str(fnc['nodes']) + ' nodes'} on, the {fnc['limited_by']} ceiling bites."
    )
    lines += [
        "",
        f"- CPUs bite while nodes x {knee:.0f} < min(ingest {ingest_img_s:.0f}, network {net_img_s:.0f}); " + where,
        f"- {args.cores}-core nodes needed to reach each ceiling: trainer ingest "
        f"{ingest_img_s / knee:.2f}, network {net_img_s / knee:.2f}. The ingest ceiling is a loopback figure "
        "from a 2-core machine; measure it on the real trainer (bench_ingest.py) before trusting where it bites.",
    ]
    if checks:
        lines += [
            "",
            *h.markdown_table(
                [
                    "simulated worker nodes (1 CPU each)",
                    "actors (on driver's node)",
                    "measured images/s",
                    "model (C=1)",
                    "measured / model",
                    "other load",
                ],
                [
                    [
                        c["worker_nodes"],
                        f"{c['actors']} ({c['actors_on_driver_node']})",
                        c["measured"],
                        c["model"],
                        f"{c['ratio']:.2f}",
                        h.fmt(c["other_load"], ".2f"),
                    ]
                    for c in checks
                ],
            ),
            "",
            f"- This machine has {os.cpu_count()} cores: the head, the worker nodes and the driver share them. "
            "At 1 worker node the actor has a core and the driver the other; at 2 the two actors and the driver's "
            "receive/copy compete for 2 cores, so the ratio there mixes model error with contention; beyond 2 "
            "worker nodes the check would mean nothing and is not run.",
        ]
    h.emit(
        lines,
        args,
        {
            "benchmark": "scaleout_model",
            "per_core_images_per_s": per_core,
            "batch_bytes": batch_bytes,
            "cores_per_node": args.cores,
            "network_gbit": args.network_gbit,
            "network_images_per_s": net_img_s,
            "ingest_batches_per_s": ingest_bps,
            "ingest_images_per_s": ingest_img_s,
            "ingest_source": ingest_src,
            "ingest": ingest_doc,
            "rows": rows,
            "checks": checks,
        },
        log,
    )
    if args.plot:
        plot_model(args.plot, args, per_core, ingest_img_s, net_img_s)
    return 0


def plot_model(path: Path, args, per_core: float, ingest_img_s: float, net_img_s: float) -> None:
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, nothing global to close

    xs = list(range(1, 65))
    ax = Figure(figsize=(7, 4), dpi=110).subplots()
    ax.plot(xs, [x * args.cores * per_core for x in xs], ls="--", color="tab:blue", label="CPUs alone")
    ax.axhline(ingest_img_s, ls=":", color="tab:red", label="trainer ingest (measured)")
    ax.axhline(net_img_s, ls=":", color="tab:purple", label=f"NIC {args.network_gbit:g} Gbit/s")
    ax.plot(
        xs,
        [predict(x, args.cores, per_core, ingest_img_s, net_img_s)[0] for x in xs],
        color="black",
        lw=2,
        label="predicted",
    )
    ax.set(yscale="log", xlabel="worker nodes", ylabel="images/s")
    ax.set_xscale("log", base=2)
    ax.set_title(f"predicted images/s: {args.cores}-core worker nodes at {per_core:.0f} img/s per core", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax.figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    ax.figure.savefig(path)


if __name__ == "__main__":
    sys.exit(main())
