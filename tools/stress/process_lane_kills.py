"""Stress reproducer: the process lane's workers SIGKILLed at random moments, many times, each
round under a deadline; a round that misses it is a wedged lane (the script dumps every
thread's stack with faulthandler, names the round, and exits 1).

Each round starts a lane, runs a batch, then kills a worker at one of three moments: right as a
result arrives (the worker may still be finishing its write), a random 0-50 ms into a batch, or
while it waits for work; then it needs a report for the batch it held and a batch from the
replacement, within ``--deadline`` seconds. ``--burners N`` starts N busy processes (stopped by
pid at the end) to load the machine, as a loaded CI box is.

    .venv/bin/python tools/stress/process_lane_kills.py --rounds 200 --burners 4
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import multiprocessing as mp
import os
import random
import signal
import sys
import tempfile
import threading
import time

import numpy as np

from hybridload import recipe, sources
from hybridload.cli.demo_data import make_photo_folder
from hybridload.lanes._base import BatchTask
from hybridload.lanes._local.process import ProcessLane

MOMENTS = ("on-result", "mid-batch", "idle")


def _burn() -> None:
    while True:
        pass


def held_locks(lane) -> str:
    """What a wedged lane shows: the stacks of this process's threads, and whether a lock shared
    by the workers (a multiprocessing queue's writer lock, where the lane has one) is held."""
    faulthandler.dump_traceback(all_threads=True)
    shared = getattr(getattr(lane, "_results", None), "_wlock", None)
    if shared is None:
        return ""
    if not shared.acquire(timeout=1):
        return "; the workers' shared results queue's writer lock is held (by a dead worker)"
    shared.release()
    return "; the workers' shared results queue's writer lock is free"


def one_round(root: str, moment: str, deadline_s: float, rng: random.Random, start_method: str) -> str | None:
    """One kill; None when the lane came through, else what it was stuck on."""
    lane = ProcessLane(
        sources.ImageFolder(root), recipe.imagenet_eval(32), workers=2, batch_size=2, start_method=start_method
    )
    try:
        lane.run_batch(BatchTask(0, 0, np.arange(2)))
        reports, arrived = {}, threading.Condition()
        victim = lane._procs[0].pid

        def done(task, out):
            if moment == "on-result" and task.seq == 1:
                os.kill(victim, signal.SIGKILL)  # the worker may not have finished its write yet
            with arrived:
                reports[task.seq] = out
                arrived.notify_all()

        lane.submit(BatchTask(1, 0, np.arange(2)), done)
        if moment == "mid-batch":
            time.sleep(rng.uniform(0, 0.05))
            os.kill(victim, signal.SIGKILL)
        with arrived:
            if not arrived.wait_for(lambda: 1 in reports, timeout=deadline_s):
                return "batch 1 (the killed worker's) never came back" + held_locks(lane)
        if moment == "idle":
            os.kill(victim, signal.SIGKILL)
        for k in range(2, 6):
            lane.submit(BatchTask(k, 0, np.arange(2)), done)
        with arrived:
            if not arrived.wait_for(lambda: len(reports) == 5, timeout=deadline_s):
                return f"batches {sorted(set(range(1, 6)) - set(reports))} never came back" + held_locks(lane)
        return None
    finally:
        lane.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--deadline", type=float, default=30.0, help="seconds a round may take")
    ap.add_argument("--burners", type=int, default=0, help="busy processes to start (stopped at the end)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start-method", default="fork", choices=("fork", "forkserver", "spawn"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    rng = random.Random(args.seed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout`: still stop the burners
    burners = [mp.get_context("fork").Process(target=_burn, daemon=True) for _ in range(args.burners)]
    for b in burners:
        b.start()
    failed = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = make_photo_folder(os.path.join(tmp, "photos"), n=16, seed=0)
            started = time.monotonic()
            for r in range(args.rounds):
                moment = MOMENTS[r % len(MOMENTS)]
                faulthandler.dump_traceback_later(3 * args.deadline + 10, exit=True)  # a wedge even in close()
                stuck = one_round(str(root), moment, args.deadline, rng, args.start_method)
                faulthandler.cancel_dump_traceback_later()
                if (r + 1) % 50 == 0:
                    print(f"{r + 1} rounds, {time.monotonic() - started:.0f} s", flush=True)
                if stuck is not None:
                    failed += 1
                    print(f"round {r} ({moment}): wedged: {stuck}", file=sys.stderr)
                    break
            print(
                f"{r + 1} rounds, {failed} wedged, {time.monotonic() - started:.0f} s, {args.burners} burners, "
                f"{args.start_method}"
            )
    finally:
        for b in burners:
            os.kill(b.pid, signal.SIGKILL)
            b.join(5)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
