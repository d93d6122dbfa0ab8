"""The trainer of the multi-host tests (tests/test_multihost.py), run on host "a" of
:mod:`support.netns_hosts`: one epoch on the local lane (the reference), then the same epoch
on Ray actors of the two-host cluster, changing the cluster after batch ``--at`` (``--action``:
kill host b, start host b, drain host b) and waiting (``--wait``) until the pool shows the
change before taking the rest. Prints one JSON line: the two streams' digests compared,
the indices seen, and the loader's ``stats()``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from hybridload import HybridLoader, LoaderPolicy, recipe, sources

from support.netns_hosts import ADDRESSES, Hosts, kill_namespace
from support.streams import batch_digest, stream

REC = recipe.imagenet_train(32)


def until(pred, deadline_s: float, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {deadline_s} s: {what}")
        time.sleep(0.1)


def alive_nodes() -> int:
    import ray

    return sum(n["Alive"] for n in ray.nodes())


def change(action: str, hosts: Hosts) -> None:
    if action == "kill-b":
        kill_namespace(hosts.ns["b"], signal.SIGKILL, 0.0)
    elif action == "start-b":
        hosts.start_worker()
    elif action == "drain-b":
        import ray

        (node_id,) = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] == ADDRESSES["b"]]
        subprocess.run(
            [
                hosts.ray_bin,
                "drain-node",
                f"--address={hosts.head}",
                f"--node-id={node_id}",
                "--reason=DRAIN_NODE_REASON_PREEMPTION",
                "--reason-message=multihost test",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--state", required=True, help="Hosts.state() as JSON")
    ap.add_argument("--nodes", type=int, required=True, help="alive nodes to wait for before starting")
    ap.add_argument("--at", type=int, default=-1)
    ap.add_argument("--action", default="none", choices=("none", "kill-b", "start-b", "drain-b"))
    ap.add_argument("--wait", default="none", choices=("none", "actors", "no-actors", "node-left"))
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--deadline", type=float, default=60.0)
    args = ap.parse_args()
    hosts = Hosts.attach(json.loads(args.state))
    src = sources.ImageFolder(args.data)
    with HybridLoader(
        src, REC, args.batch_size, seed=5, return_indices=True, policy=LoaderPolicy(cpu_actors=0, threads=1)
    ) as ref:
        expected = stream(ref)
    from hybridload.raycluster import _connect as connect

    connect.acquire(hosts.head)  # the loader's own connection (kept when released: the loader reuses it)
    connect.release()
    until(lambda: alive_nodes() == args.nodes, args.deadline, f"{args.nodes} alive nodes")
    policy = LoaderPolicy(
        ray_address=hosts.head,
        placement="remote-first",
        cpu_actors=1,
        reserve_local_cpus=1,
        batch_timeout_s=args.deadline,
        window=2,
    )
    got, seen = [], []
    with HybridLoader(src, REC, args.batch_size, seed=5, return_indices=True, policy=policy) as ld:
        for k, batch in enumerate(ld):
            got.append(batch_digest(batch))
            seen += batch[2].tolist()
            if k == args.at:
                pool = ld._lanes[0]
                change(args.action, hosts)
                if args.wait == "actors":
                    until(lambda: pool.parallelism >= 1, args.deadline, "a Ray actor on host b")
                elif args.wait == "no-actors":
                    until(lambda: pool.parallelism == 0, args.deadline, "no Ray actor left")
                elif args.wait == "node-left":  # the head declared the node dead, the pool saw it
                    until(
                        lambda: any(e["event"] == "left" for e in pool.stats()["node_events"]),
                        args.deadline,
                        "host b's node seen leaving the cluster",
                    )
        stats = ld.stats()
    print(
        json.dumps(
            {
                "same_stream": got == expected,
                "batches": len(got),
                "indices": sorted(seen),
                "samples": len(src),
                "stats": stats,
            },
            default=str,
        )
    )
    sys.stdout.flush()
    os._exit(0)  # Ray's exit hooks can take seconds; everything that matters is printed


if __name__ == "__main__":
    main()
