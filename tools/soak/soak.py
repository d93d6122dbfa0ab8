"""Chaos soak: a training-like job over a small real photo set (on a moto S3 server on
127.0.0.1) until a few epochs after its last fault, with a fault schedule drawn from ``--seed``
injected at random moments: the trainer SIGKILLed and restarted from its last checkpoint (on 1,
2 or 3 gloo ranks), a process-lane worker SIGKILLed, a Ray actor SIGKILLed (also while the job
starts), a Ray node removed or added, the S3 server stopped for seconds, a GPU-lane device fault
(DALI's CPU-only stand-in, the recorded CUDA message). What the job trained on (its checkpoints'
record of each sample's index, label and pixels) must equal an uninterrupted run with the same
world sizes: nothing lost, nothing repeated beyond the padding, the same order, the same pixels;
and after it no process, actor or shared-memory segment is left, RSS flat, file descriptors flat
once the last fault is over.

    python tools/soak/soak.py --seed 3 --faults 12

Exits 0 when everything held, 1 otherwise; prints the seed and the schedule first (the same
command replays it) and, last, a line with the counts per fault kind and the recovery times.
``--json FILE`` keeps the result; ``python tools/soak/soak.py --table A.json B.json`` prints the
table of several.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # support/: helpers the tests share

import _soak_world as world
from _soak_check import calm_since, compare, fd_growth, leftovers, reference, rss_growth
from _soak_faults import describe, done_kind, draw_schedule, steps_needed
from _soak_pools import RAY_STEPS, ray_steps
from _soak_run import Deadline, Driver
from _soak_stop import POOL_WAIT_S
from _soak_trainer import BATCH, WINDOW
from support.readings import fd_count

log = logging.getLogger("soak")
RSS_TOLERANCE_KIB = 64 * 1024  # a trainer's RSS may grow this much from its first epoch's end to its last
FD_TOLERANCE = 2


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seed", type=int, default=0, help="draws the fault schedule (the same seed replays it)")
    ap.add_argument("--faults", type=int, default=12, help="faults to inject")
    ap.add_argument("--samples", type=int, default=48, help="photos in the data set")
    ap.add_argument("--deadline-s", type=float, default=1800, help="give up (exit 1) after this many seconds")
    ap.add_argument("--step-s", type=float, default=0.05, help="the model's time per step (a sleep)")
    ap.add_argument("--save-every", type=int, default=3, help="checkpoint every this many steps")
    ap.add_argument("--kinds", default="", help="comma-separated fault kinds to draw from (default: all)")
    ap.add_argument("--worlds", default="1,2,3", help="comma-separated world sizes a restarted job draws from")
    ap.add_argument(
        "--pool-wait-s",
        type=float,
        default=POOL_WAIT_S,
        help="seconds the job trains on after its last fault while a Ray pool is not back at its target"
        " (a kill whose pool is not back when the job ends is not timed)",
    )
    ap.add_argument(
        "--ray-default-niceness",
        action="store_true",
        help="run the Ray cluster's workers at Ray's default niceness (15), as a cluster started by `ray start`;"
        " by default they run at the trainer's (RAY_worker_niceness=0 unless set), as in hybridload's embedded cluster",
    )
    ap.add_argument("--json", type=Path, help="also write the result here")
    ap.add_argument("--data", type=Path, help="where the photos are made (default: a temporary folder)")
    args = ap.parse_args(argv)
    if args.faults < 0 or args.samples < 8:
        ap.error("--faults must be >= 0 and --samples >= 8")
    if not args.pool_wait_s >= 0:
        ap.error("--pool-wait-s must be a number of seconds >= 0, e.g. --pool-wait-s 60")
    return args


def epochs_for(lives: list[dict], samples: int, step_s: float, pool_wait_s: float = POOL_WAIT_S) -> int:
    """The job's most epochs, the guard of its end (it stops sooner, a few epochs after the last
    fault is over: `_soak_stop`): enough for the schedule's steps (`steps_needed`) at the
    largest world size (3 ranks: the fewest steps an epoch), and one more: an epoch that a
    resumed job splits over two world sizes may take a step fewer than a whole epoch at 3 ranks.
    A wait for the Ray pools longer than the default ``POOL_WAIT_S`` (which the bound's room
    covers) adds its steps: each step sleeps ``step_s``, so that many steps outlast the wait."""
    per_epoch = math.ceil(samples / 3 / BATCH)
    waited = math.ceil(max(0.0, pool_wait_s - POOL_WAIT_S) / step_s)
    return max(2, math.ceil((steps_needed(lives, step_s, WINDOW) + waited) / per_epoch) + 1)


def summary(events: list[dict]) -> str:
    by = defaultdict(list)
    for e in events:
        by[e["kind"]].append(e["recovery_s"])
    counts = " ".join(f"{k}={len(v)}" for k, v in sorted(by.items()))
    rec = [e["recovery_s"] for e in events]
    times = f"recovery median {statistics.median(rec):.2f} s max {max(rec):.2f} s" if rec else "no recovery"
    return f"faults {len(events)}: {counts}; {times}"


def pool_summary(results: list[dict]) -> str:
    """The Ray pools after actor kills: seconds until every pool with a target above 0 was back at
    it (median, max; kills it did not come back from while the job ran), the pools' time without a
    ready actor while they had a target, and apart, their time at target 0 (no slot for the rank)."""
    kills = [e for r in results for e in r["events"] if "pool_recovery_s" in e]
    back = [e["pool_recovery_s"] for e in kills if e["pool_recovery_s"] is not None]
    empty = [x for r in results for x in r.get("pool_without_actors_s", [])]
    zero = [x for r in results for x in r.get("pool_zero_target_s", [])]
    if not kills and not empty:
        return "no Ray pool"
    times = f"median {statistics.median(back):.2f} s, max {max(back):.2f} s" if back else "never"
    return (
        f"Ray pool back at its target after {len(kills)} actor kills: {times}"
        f" ({len(kills) - len(back)} not back while the job ran); without a ready actor"
        f" {sum(empty):.1f} s in all over {len(empty)} pool lives (max {max(empty, default=0):.1f} s);"
        f" at target 0 (no slot for the rank) {sum(zero):.1f} s (max {max(zero, default=0):.1f} s)"
    )


def kill_lines(events: list[dict]) -> list[str]:
    """One line per actor kill: seconds from the kill to the pool back at its target (the soak's
    reading of the trainers' pools) and to each step of its replacement's start in Ray's timings
    (`_soak_pools.RAY_STEPS`)."""

    def s(x) -> str:
        return "-" if x is None else f"{x:.2f}"

    lines = []
    for e in events:
        if "pool_recovery_s" not in e:
            continue
        steps = e.get("ray_steps") or {}
        ray = ", ".join(f"{k} {s(steps.get(k))}" for k in RAY_STEPS) if steps else "not in Ray's records"
        lines.append(f"{e['what'][:40]}: pool back at its target {s(e['pool_recovery_s'])} s; Ray: {ray}")
    return lines


def ray_summary(results: list[dict]) -> str:
    """Median and max seconds from an actor kill to each step of its replacement's start (Ray's
    timings), over the kills Ray recorded a replacement for."""
    steps = [e["ray_steps"] for r in results for e in r["events"] if e.get("ray_steps")]
    if not steps:
        return "no actor kill with a replacement in Ray's records"
    parts = []
    for k in RAY_STEPS:
        have = [x[k] for x in steps if k in x]  # (a result written before the soak read a step lacks it)
        got = [x for x in have if x is not None]
        span = f"{statistics.median(got):.2f} / {max(got):.2f}" if got else "never"
        parts.append(f"{k} {span}" + (f" ({len(have) - len(got)} not reached)" if len(got) < len(have) else ""))
    return f"after {len(steps)} actor kills, seconds to the replacement's (median / max): " + "; ".join(parts)


def soak(args, kinds=None) -> dict:
    """Run one soak; the result (its ``problems`` empty when everything held)."""
    worlds = tuple(int(w) for w in str(args.worlds).split(","))
    lives = draw_schedule(args.seed, args.faults, kinds=kinds, worlds=worlds)
    print(
        f"soak --seed {args.seed} --faults {args.faults} --worlds {args.worlds}"
        + (f" --kinds {args.kinds}" if args.kinds else "")
        + (" --ray-default-niceness" if args.ray_default_niceness else "")
    )
    print(describe(lives), flush=True)
    t_start = time.monotonic()
    deadline = t_start + args.deadline_s
    tmp = Path(tempfile.mkdtemp(prefix="hybridload-soak-"))
    paths, labels = world.tiny_photos(args.data or tmp / "photos", args.samples)
    epochs = epochs_for(lives, args.samples, args.step_s, args.pool_wait_s)
    niceness = world.worker_niceness(dict(os.environ), args.ray_default_niceness)
    storage = cluster = None
    problems: list[str] = []
    driver = None
    try:
        storage = world.S3Server(paths)
        if any(life["lanes"] == "ray" for life in lives):
            try:
                cluster = _start_cluster(niceness)
            except RuntimeError as e:  # a machine too loaded for Ray: a failed soak, said so
                problems.append(str(e))
        if not problems:
            run_dir = tmp / "run"
            run_dir.mkdir()
            driver = Driver(
                run_dir,
                seed=args.seed,
                epochs=epochs,
                paths=storage.urls,
                labels=labels,
                storage=storage,
                cluster=cluster,
                deadline=deadline,
                step_s=args.step_s,
                save_every=args.save_every,
                pool_wait_s=args.pool_wait_s,
            )
            try:
                driver.run(lives)
            except Deadline:
                problems.append(f"the deadline ({args.deadline_s} s) passed before the job finished")
                driver.stop_all()
            driver.note(force=True)
            problems += driver.problems
            if cluster is not None:
                alive = _wait_no_actors(cluster)
                problems += [f"Ray actor {a} alive after the job ended" for a in alive]
                try:  # each actor kill's replacement in Ray's own timings
                    ray_steps(driver.events, cluster.actor_starts())
                except Exception as e:  # a Ray whose private state API moved: the soak's verdict stands
                    log.warning("could not read Ray's actor starts (%s: %s)", type(e).__name__, e)
    finally:
        if driver is not None:
            driver.stop_all()
        if cluster is not None:
            cluster.close()
        if storage is not None:
            storage.close()
    events = driver.events if driver else []
    statuses = driver.statuses if driver else []
    trained = None  # the epochs the job trained (it stops early once the last fault is over)
    if not problems:
        trained = json.loads((run_dir / "done.json").read_text()).get("epochs")
        if not isinstance(trained, int):
            problems.append(f"the job's done.json says no epochs trained ({trained!r})")
    if not problems:
        ckpt = json.loads((run_dir / "checkpoint.json").read_text())
        fd0 = fd_count()
        want = reference([str(p) for p in paths], labels, seed=args.seed, epochs=trained, segments=ckpt["segments"])
        if fd_count() > fd0 + FD_TOLERANCE:  # the reference's loaders, in this process, all closed
            problems.append(f"{fd_count() - fd0} more file descriptors open after the reference's loaders closed")
        problems += compare(ckpt["records"], want, num_samples=len(paths))
        got_epochs = {r[0] for r in ckpt["records"]}
        if got_epochs != set(range(trained)) or not 0 < trained <= epochs:
            problems.append(
                f"the job trained epochs {sorted(got_epochs)}, not 0..{trained - 1} (done.json; at most {epochs})"
            )
    problems += leftovers(driver.seen if driver else {}, driver.shm if driver else set())
    growth = rss_growth(statuses)
    if growth > RSS_TOLERANCE_KIB:
        problems.append(f"a trainer's RSS grew {growth // 1024} MiB between epoch ends")
    fds = fd_growth(statuses, calm_since(events))
    if fds > FD_TOLERANCE:
        problems.append(
            f"a trainer holds {fds} more file descriptors at its last epoch end than its first after the faults"
        )
    if problems or (driver and driver.crashes):
        print(f"kept the run's folder (logs, checkpoint): {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "seed": args.seed,
        "faults": args.faults,
        "epochs": trained if trained is not None else epochs,
        "max_epochs": epochs,
        "events": events,
        "counts": dict(Counter(e["kind"] for e in events)),
        "crash_restarts": driver.crashes if driver else [],
        "pool_without_actors_s": driver.pool_watch.empty_s if driver else [],
        "pool_zero_target_s": driver.pool_watch.zero_target_s if driver else [],
        "lives": driver.lives if driver else 0,
        "rss_growth_kib": growth,
        "problems": problems,
        "processes_seen": len(driver.seen) if driver else 0,
        "shm_seen": len(driver.shm) if driver else 0,
        "seconds": round(time.monotonic() - t_start, 1),
        "ray_worker_niceness": niceness,  # None: Ray's default (15)
    }


def _start_cluster(niceness: str | None, tries: int = 3):
    """The Ray cluster; tried again when a node times out starting (a loaded machine): Ray waits
    30 s for a raylet to register (``raylet_start_wait_time_s`` in ``ray/_private/node.py``, a
    constant of Ray 2.60 with no setting), then raises a bare Exception."""
    for k in range(tries):
        before = set(world.children_of(os.getpid()))
        try:
            return world.RayCluster(workers=2, niceness=niceness)
        except Exception as e:  # Ray raises a bare Exception for a node's start timeout
            for pid in set(world.children_of(os.getpid())) - before:  # what the failed start left running
                world.end_leftover(pid)
            if k + 1 == tries:
                raise RuntimeError(f"the Ray cluster did not start in {tries} tries: {e}") from e
            log.warning("the Ray cluster did not start (%s); trying again", e)


def _wait_no_actors(cluster, timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        alive = cluster.actors_alive()
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(1)


def table(results: list[dict]) -> str:
    """A markdown table of several soaks' ``--json`` results: per fault kind, the count and the
    recovery times; then the totals and whether every invariant held."""
    by = defaultdict(list)
    for r in results:
        for e in r["events"]:
            by[done_kind(e["kind"], e["what"])].append(e["recovery_s"])
    rows = ["| fault | injected | recovery median (s) | recovery max (s) |", "| --- | --- | --- | --- |"]
    rows += [f"| {k} | {len(v)} | {statistics.median(v):.2f} | {max(v):.2f} |" for k, v in sorted(by.items())]
    every = [x for v in by.values() for x in v]
    rows.append(f"| all | {len(every)} | {statistics.median(every):.2f} | {max(every):.2f} |")
    held = sum(not r["problems"] for r in results)
    rows.append(
        f"\n{len(results)} soaks (seeds {', '.join(str(r['seed']) for r in results)}), {held} held every "
        f"invariant; {sum(r['epochs'] for r in results)} epochs, {sum(r['lives'] for r in results)} job "
        f"starts, {sum(len(r['crash_restarts']) for r in results)} crash restarts, "
        f"{sum(r['seconds'] for r in results) / 60:.0f} minutes"
    )
    rows.append(f"\n{pool_summary(results)}")
    rows.append(f"\n{ray_summary(results)}")
    return "\n".join(rows)


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--table"]:  # soak.py --table a.json b.json: the RESULTS.md table of several soaks
        print(table([json.loads(Path(p).read_text()) for p in argv[1:]]))
        return 0
    args = parse(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k) or None
    result = soak(args, kinds)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    for line in kill_lines(result["events"]):
        print(line)
    for p in result["problems"]:
        print(f"PROBLEM: {p}")
    verdict = "held" if not result["problems"] else f"FAILED ({len(result['problems'])} problems)"
    print(
        f"soak seed {args.seed}: {verdict}; {result['lives']} lives, {len(result['crash_restarts'])} crash restarts, "
        f"{result['epochs']} epochs (at most {result['max_epochs']}), {result['seconds']} s, {result['processes_seen']} processes and "
        f"{result['shm_seen']} shared-memory segments watched; {summary(result['events'])}; "
        f"{pool_summary([result])}; {ray_summary([result])}"
    )
    return 0 if not result["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
