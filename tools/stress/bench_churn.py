"""Pool recovery under node churn: a worker node is lost mid-run and a fresh one joins; how
long until the Ray lane is back at full capacity, and images/s during and after the churn
against a fault-free run over the same batches (paired: each round runs both, same cluster).

    python tools/stress/bench_churn.py [--n 512] [--rounds 3] [--epochs 8] [--graceful] [--out F]

A loopback cluster: a head (the trainer's node, its CPUs reserved) and ``--workers`` worker
nodes of one CPU; the Ray lane runs one actor per worker CPU (placement "remote-first").
In the churn run, after ``--churn-at`` of the batches, one worker node is removed (killed
outright unless ``--graceful``) and a new one added. Reported per round: seconds from the loss
to Ray declaring the node dead, to the new node joining, to the pool being back at its target
with an actor on the new node (``recovery_s``); images/s of both runs over the batches
delivered between the loss and the recovery ("during") and after it ("after"), and their ratio.
"""

from __future__ import annotations

import logging
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # the harness and the photo set

import _harness as h
from _data import loopback_cluster, parser, photo_source
from hybridload import HybridLoader, LoaderPolicy, recipe

log = logging.getLogger("bench_churn")
BS = 16


class Churn:
    """Removes ``node`` and adds a fresh one (Ray's Cluster needs the main thread for that, so
    the run consumes batches in another thread); records when Ray declared the node dead, when
    the new one joined, when the pool was back at its target with an actor on the new node."""

    def __init__(self, cluster, node, graceful: bool, store_mb: int):
        self.cluster, self.node, self.graceful, self.store_mb = cluster, node, graceful, store_mb
        self.t: dict[str, float] = {}
        self.new_node = None

    def __call__(self, lane) -> None:
        import ray

        self.t["loss"] = time.perf_counter()
        gone = self.node.node_id
        self.cluster.remove_node(self.node, allow_graceful=self.graceful)
        _wait(lambda: not any(n["NodeID"] == gone and n["Alive"] for n in ray.nodes()), 120)
        self.t["dead"] = time.perf_counter()
        self.new_node = self.cluster.add_node(
            num_cpus=1, node_ip_address="127.0.0.1", object_store_memory=self.store_mb << 20
        )
        self.cluster.wait_for_nodes(timeout=120)
        self.t["joined"] = time.perf_counter()
        target = lane.stats()["target"] or 1

        def recovered():
            ready = [m.node_id for m in lane.members() if m.state.value == "ready"]
            return len(ready) >= target and self.new_node.node_id in ready

        _wait(recovered, 120)
        self.t["recovered"] = time.perf_counter()


def _wait(pred, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout_s} s")
        time.sleep(0.05)


def run(src, rec, policy, epochs: int, churn: Churn | None, churn_at: float) -> dict:
    """One run; returns the delivery time of every batch and the pool's stats."""
    times: list[float] = []
    reached, failed = threading.Event(), []
    with HybridLoader(src, rec, BS, seed=1, policy=policy) as ld:
        at = int(epochs * len(ld) * churn_at)

        def consume():
            try:
                for e in range(epochs):
                    ld.set_epoch(e)
                    for _batch in ld:
                        times.append(time.perf_counter())
                        if len(times) == at:
                            reached.set()
            except BaseException as exc:  # reported by the main thread
                failed.append(exc)
            finally:
                reached.set()

        consumer = threading.Thread(target=consume, name="bench-consumer", daemon=True)
        consumer.start()
        if churn is not None:
            reached.wait(600)
            churn(ld._lanes[0])
        consumer.join(900)
        if failed:
            raise failed[0]
        return {"times": times, "pool": ld.stats()["actor_pools"]["ray"]}


def rate(times: list[float], lo: int, hi: int) -> float | None:
    """Images/s over the batches delivered after batch ``lo`` up to batch ``hi``."""
    if hi - lo < 1:
        return None
    return (hi - lo) * BS / max(times[hi - 1] - times[lo - 1], 1e-9)


def one_round(src, rec, policy, args, cluster, node) -> tuple[dict, object]:
    free = run(src, rec, policy, args.epochs, None, args.churn_at)
    churn = Churn(cluster, node, args.graceful, args.store_mb)
    churned = run(src, rec, policy, args.epochs, churn, args.churn_at)
    t, times = churn.t, churned["times"]
    lo = int(len(times) * args.churn_at)
    hi = max(lo + 1, sum(x <= t.get("recovered", times[-1]) for x in times))
    row = {
        "dead_s": t["dead"] - t["loss"],
        "joined_s": t["joined"] - t["loss"],
        "recovery_s": t["recovered"] - t["loss"] if "recovered" in t else None,
        "batches_during": hi - lo,
        "batches_after": len(times) - hi,
    }
    for name, r in (("free", free), ("churn", churned)):
        row[f"{name}_during"] = rate(r["times"], lo, hi)
        row[f"{name}_after"] = rate(r["times"], hi, len(r["times"]))
    for part in ("during", "after"):
        a, b = row[f"churn_{part}"], row[f"free_{part}"]
        row[f"ratio_{part}"] = a / b if a and b else None
    row["pool"] = churned["pool"]
    log.info("round: %s", {k: v for k, v in row.items() if k != "pool"})
    return row, churn.new_node


def main(argv=None) -> int:
    ap = parser(__doc__, n=512, rounds=3, quick="60 images of 64 px, 30 epochs, 1 round, a graceful removal")
    ap.add_argument("--size", type=int, default=224, help="output side of imagenet_train")
    ap.add_argument("--epochs", type=int, default=8, help="epochs a run (long enough to see the pool recover)")
    ap.add_argument("--workers", type=int, default=2, help="worker nodes of one CPU each")
    ap.add_argument("--churn-at", type=float, default=0.1, help="fraction of the run's batches before the loss")
    ap.add_argument("--graceful", action="store_true", help="stop the node's processes with SIGTERM, not SIGKILL")
    ap.add_argument("--store-mb", type=int, default=200)
    ap.add_argument("--poll-s", type=float, default=None, help="the pool's node-table poll (default: the library's)")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.size, args.rounds, args.graceful, args.epochs = 60, 64, 1, True, 30
    h.setup_logging()
    logging.getLogger("hybridload").setLevel(logging.ERROR)
    if args.poll_s is not None:
        import os

        os.environ["HYBRIDLOAD_NODE_POLL_S"] = str(args.poll_s)
    _folder, src = photo_source(args.root, args.n, log)
    rec = recipe.imagenet_train(args.size)
    env = h.environment()
    rows = []
    with loopback_cluster(head_cpus=2, worker_cpus=1, workers=args.workers, store_mb=args.store_mb) as (cluster, nodes):
        import ray

        env["ray"] = ray.__version__
        policy = LoaderPolicy(ray_address="embedded", reserve_local_cpus=2, batch_timeout_s=300)
        node = nodes[-1]
        for _ in range(args.rounds):
            row, node = one_round(src, rec, policy, args, cluster, node)
            rows.append(row)

    def med(key):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return statistics.median(vals) if vals else None

    lines = [
        f"## bench_churn: {args.n} photo JPEGs, imagenet_train({args.size}), batch {BS}, {args.epochs} epoch(s) "
        f"a run, {args.workers} worker nodes, node {'stopped (SIGTERM)' if args.graceful else 'killed'} after "
        f"{args.churn_at:.0%} of the batches, {args.rounds} paired round(s)\n",
        h.environment_line(env),
    ]
    lines += h.markdown_table(
        [
            "round",
            "Ray declared dead (s)",
            "new node joined (s)",
            "full capacity (s)",
            "free during",
            "churn during",
            "ratio during",
            "free after",
            "churn after",
            "ratio after",
        ],
        [
            [
                i,
                h.fmt(r["dead_s"], ".1f"),
                h.fmt(r["joined_s"], ".1f"),
                h.fmt(r["recovery_s"], ".1f"),
                h.fmt(r["free_during"]),
                h.fmt(r["churn_during"]),
                h.fmt(r["ratio_during"], ".2f"),
                h.fmt(r["free_after"]),
                h.fmt(r["churn_after"]),
                h.fmt(r["ratio_after"], ".2f"),
            ]
            for i, r in enumerate(rows)
        ],
    )
    lines.append(
        f"\nmedian: full capacity {h.fmt(med('recovery_s'), '.1f')} s after the loss; images/s during the "
        f"churn {h.fmt(med('ratio_during'), '.2f')} x, after it {h.fmt(med('ratio_after'), '.2f')} x the "
        "fault-free run's over the same batches."
    )
    h.emit(lines, args, {"benchmark": "bench_churn", "environment": env, "rounds": rows}, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
