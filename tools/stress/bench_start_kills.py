"""A Ray pool's actor killed while it starts: seconds from the kill to a ready actor again.

    python tools/stress/bench_start_kills.py [--rounds 6] [--start-s 2] [--label after] [--out F]

Each round opens an `ActorPool` of one actor on a local Ray instance on 127.0.0.1 (its start
takes ``--start-s`` besides the process's own start and the pool worker's imports: an actor
importing its libraries on a loaded machine), kills that actor (``ray.kill``) while it starts,
and times the kill until the pool has a ready actor again; the pool's local stand-in would run
the batches meanwhile (``on_no_actors="local"``). The keeper reads the node table every 5 s (the
default). Run it twice side by side, one copy on the code before a change (``PYTHONPATH``
naming that copy, ``--label before``), on a shared machine: the difference of the medians is
what the change is worth.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only: before Ray is imported
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

# support/ (the slow actor and its killer, shared with the tests) on this process's path and on
# its Ray workers', which import the actor's class by name
TESTS = str(Path(__file__).resolve().parents[2] / "tests")
sys.path.insert(0, TESTS)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)

from support.actor_kills import SlowStart, kill_first_actor, named_actors


def one_round(start_s: float, timeout_s: float = 300.0) -> float | None:
    """Seconds from killing the pool's starting actor to a ready one (None: not within ``timeout_s``)."""
    from hybridload.lanes._ray import ActorPool, PoolConfig
    from hybridload.raycluster import PlacementRules

    killed: dict = {}
    old = {a["name"] for a in named_actors()}  # an earlier round's, if Ray still lists it
    killer = threading.Thread(target=kill_first_actor, args=(f"hybridload-{os.getpid()}-", old, 120, killed))
    killer.start()
    config = PoolConfig(rules=PlacementRules(placement="any", reserve_local_cpus=0, cpu_actors=1), on_no_actors="local")
    pool = ActorPool(SlowStart, (start_s,), config)
    try:
        killer.join(130)
        if "t" not in killed:
            return None
        while pool.parallelism < 1:
            if time.monotonic() - killed["t"] > timeout_s:
                return None
            time.sleep(0.02)
        return time.monotonic() - killed["t"]
    finally:
        pool.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--start-s", type=float, default=2.0, help="each actor's start, besides its process's")
    ap.add_argument("--label", default="this tree", help="names the run in its output, e.g. before or after")
    ap.add_argument("--out", help="also write the times here (JSON)")
    args = ap.parse_args(argv)
    import logging

    import ray

    logging.basicConfig(level=logging.WARNING)
    ray.init(
        address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", logging_level="WARNING"
    )
    try:
        times = [one_round(args.start_s) for _ in range(args.rounds)]
    finally:
        ray.shutdown()
    done = [t for t in times if t is not None]
    print(
        f"{args.label}: kill while starting -> ready again, {len(done)}/{len(times)} rounds: "
        + (f"median {statistics.median(done):.2f} s, max {max(done):.2f} s" if done else "none")
        + f"; each: {', '.join(f'{t:.2f}' if t is not None else '-' for t in times)}"
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"label": args.label, "start_s": args.start_s, "seconds": times}, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
