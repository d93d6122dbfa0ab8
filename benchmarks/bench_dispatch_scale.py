#!/usr/bin/env python
"""The trainer's cost per batch against the cluster's size, and the first batch against the
actor count.

1. The dispatcher and merger (``BatchStream``) over one fake lane of k slots (no Ray), k =
   32, 256, 1,024, 4,096: the lane finishes its tasks in turn at ``--rate`` batches/s (one timer
   thread), so every k runs at that rate with k tasks in flight, each about k / rate seconds. Measured per
   batch: the CPU time of the dispatcher's thread plus the consumer's (the trainer's side; from
   its own CPU clock), in steady state (after the first batch), interleaved rounds. Goal: at 4,096 within 1.5x of 32 (written as
   CPU(32) / CPU(4,096) >= 0.67). ``stragglers off`` rows: the same with re-issuing switched off.
2. Member pick + release per batch in the actor pool's table at k/2 actors (2 slots each).
3. With ``--actors 1,16``: real Ray actors (an embedded Ray on 127.0.0.1), HybridLoader's Ray
   lane, the seconds from ``iter(loader)`` (which starts the actors) to the first batch, rounds
   alternating. Goal: at 16 actors within 2x of 1 actor.
"""

from __future__ import annotations

import logging
import statistics
import sys
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np

import _harness as h
from _data import DEFAULT_PHOTO_ROOT, embedded_ray, parser, photo_source

from hybridload.execution._retry import StragglerRule
from hybridload.execution._stream import BatchStream

from hybridload.execution._pass_config import PassConfig
from hybridload.execution._tasks import LazyTasks
from hybridload.lanes._base import BatchTask, LaneKind
from hybridload.lanes._ray.members import Members
from hybridload.lanes._ray.pool_stats import PoolStats

log = logging.getLogger("bench_dispatch_scale")


class PacedLane:
    """A lane of ``slots`` slots that finishes its tasks one after another at ``rate`` per second
    (first in, first out), so every k runs at the same rate with k tasks in flight, each taking
    about k / rate seconds. One timer thread; O(1) per task: as cheap as a lane can be."""

    name, kind = "fake", LaneKind.CPU_LOCAL

    def __init__(self, slots: int, rate: float):
        self.slots = self.parallelism = slots
        self.period = 1.0 / rate
        self._queue: deque = deque()
        self._next_due = 0.0
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def describe(self) -> str:
        return f"paced lane, {self.slots} slots"

    def run_batch(self, task):
        return task.seq

    def submit(self, task, done) -> None:
        with self._cond:
            self._queue.append((task, done))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._queue:
                    self._cond.wait()
                if self._closed:
                    return
                self._next_due = max(self._next_due + self.period, time.perf_counter())
                while not self._closed and time.perf_counter() < self._next_due:  # a submit may wake it early
                    self._cond.wait(self._next_due - time.perf_counter())
                if self._closed:
                    return
                task, done = self._queue.popleft()
            done(task, task.seq)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()


class DispatchAt(h.Contestant):
    """One pass of ``batches`` tasks over a `PacedLane` of ``k`` slots."""

    def __init__(self, k: int, batches: int, rate: float, stragglers: bool):
        super().__init__(f"k={k}" + ("" if stragglers else ", stragglers off"))
        self.k, self.batches, self.rate = k, batches, rate
        self.rule = StragglerRule() if stragglers else StragglerRule(straggler_factor=None)

    def run(self, epoch: int) -> dict:
        lane = PacedLane(self.k, self.rate)
        idx = np.zeros(1, dtype=np.int64)
        tasks = LazyTasks(range(self.batches + self.k + 1), lambda k, _b: BatchTask(k, epoch, idx, size=1))
        before = set(threading.enumerate())
        stream = BatchStream([lane], tasks, PassConfig(batch_timeout_s=120, stragglers=self.rule))
        try:
            dispatcher = next(t for t in set(threading.enumerate()) - before if t.name == "hybridload-dispatch")
            clock = time.pthread_getcpuclockid(dispatcher.ident)  # the dispatcher thread's own CPU clock
            next(stream)  # the first batch: all k tasks have started, the pipeline is full (steady state)
            d0, c0, t0 = time.clock_gettime(clock), time.thread_time(), time.perf_counter()
            for _ in range(self.batches):
                next(stream)
            d1, c1, wall = time.clock_gettime(clock), time.thread_time(), time.perf_counter() - t0
        finally:
            stream.close()
            lane.close()
        trainer = (d1 - d0) + (c1 - c0)
        return {
            "images": self.batches,
            "trainer_cpu_ms_per_batch": 1e3 * trainer / self.batches,
            "dispatcher_cpu_s": d1 - d0,
            "consumer_cpu_s": c1 - c0,
            "batches_per_s": self.batches / wall,
        }


def member_cost_us(k_actors: int, reps: int = 20_000) -> float:
    """Microseconds per pick + release in a table of ``k_actors`` ready actors, 2 tasks each in flight."""
    members = Members(PoolStats())
    for _ in range(k_actors):
        members.ready(members.add(lambda key, index: key, "N", initial=True))
    held = [(members.pick(s), s) for s in range(2 * k_actors - 1)]  # the pool nearly full, as in a run
    t0 = time.perf_counter()
    for s in range(2 * k_actors, 2 * k_actors + reps):
        m = members.pick(s)
        members.release(m, s)
    del held
    return 1e6 * (time.perf_counter() - t0) / reps


def first_batch_s(actors: int, folder_source) -> float:
    from hybridload import HybridLoader, LoaderPolicy, recipe

    policy = LoaderPolicy(
        ray_address="embedded",
        mode="cpu",
        cpu_actors=actors,
        reserve_local_cpus=0,
        placement="any",
        batch_timeout_s=300,
    )
    return h.first_batch_s(HybridLoader(folder_source, recipe.imagenet_train(64), 8, policy=policy, device="cpu"))


def ray_rounds(args) -> tuple[dict, list[str]]:
    import ray

    counts = [int(a) for a in args.actors.split(",")]
    _, source = photo_source(args.root, 64, log)
    nodes = embedded_ray(max(counts) + 1)
    times: dict[int, list[float]] = {a: [] for a in counts}
    try:
        first_batch_s(counts[0], source)  # warm-up: Ray's first worker processes, imports cached
        for rnd in range(args.ray_rounds):
            order = counts if rnd % 2 == 0 else counts[::-1]
            for a in order:
                times[a].append(first_batch_s(a, source))
                log.info("round %d: first batch at %d actor(s) after %.2f s", rnd + 1, a, times[a][-1])
    finally:
        ray.shutdown()
    return times, nodes


def main(argv=None) -> int:
    ap = parser(__doc__, quick=dict(batches=600, rounds=1, slots="32,4096"), photos=False)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timed rounds (median reported)")
    ap.add_argument("--slots", default="32,256,1024,4096", help="comma-separated k")
    ap.add_argument("--batches", type=int, default=6000, help="batches per pass (after the k in flight)")
    ap.add_argument("--rate", type=float, default=500.0, help="the fake lane's batches/s at every k")
    ap.add_argument("--actors", default="", help="e.g. 1,16: also time the first batch with real Ray actors")
    ap.add_argument("--ray-rounds", type=int, default=2, help="rounds of the first-batch comparison")
    ap.add_argument("--root", default=DEFAULT_PHOTO_ROOT, type=Path, help="where the photo set for --actors lives")
    args = ap.parse_args(argv)
    ks = [int(k) for k in args.slots.split(",")]
    env = h.environment()
    cs = [DispatchAt(k, args.batches, args.rate, True) for k in ks]
    cs += [DispatchAt(k, args.batches, args.rate, False) for k in (ks[0], ks[-1])]
    per_round = h.run_rounds(cs, args.rounds, warmup_rounds=1, log=log)
    results = h.summarize_all(per_round, cs)

    def med(field: str, spec: str):  # a column: the median over the rounds of a field of the run
        return lambda r: format(statistics.median(x[field] for x in r["rounds"]), spec)

    columns = (
        ("batches/s", med("batches_per_s", ".0f")),
        ("trainer CPU ms/batch (dispatcher + consumer threads)", med("trainer_cpu_ms_per_batch", ".3f")),
        ("process CPU util (incl. the fake lane's timer)", lambda r: f"{r['median_cpu_util']:.2f}"),
    )
    small, large = f"k={ks[0]}", f"k={ks[-1]}"
    ratios = {f"CPU per batch {small} / {large}": h.ratio(results, small, large, "trainer_cpu_ms_per_batch")}
    goals = {f"CPU per batch {small} / {large}": round(1 / 1.5, 2)}
    members = [[f"{k // 2}", f"{statistics.median(member_cost_us(k // 2) for _ in range(3)):.1f}"] for k in ks]
    lines = [
        f"## bench_dispatch_scale: {args.batches} batches in steady state, fake lane at {args.rate:g} "
        f"batches/s, {args.rounds} interleaved rounds\n",
        h.environment_line(env),
        *h.results_table(results, columns, first="slots"),
        "",
        *h.ratio_table(ratios, goals),
        "",
        *h.markdown_table(["actors (2 slots each)", "member pick + release, µs"], members),
        "",
    ]
    doc = {
        "benchmark": "bench_dispatch_scale",
        "environment": env,
        "contestants": results,
        "ratios": ratios,
        "goals": h.goals_met(ratios, goals),
        "member_pick_release_us": members,
    }
    if args.actors:
        times, nodes = ray_rounds(args)
        a0, a1 = min(times), max(times)
        rows = [[str(a), " / ".join(f"{t:.1f}" for t in ts), f"{statistics.median(ts):.1f}"] for a, ts in times.items()]
        ratio = statistics.median(times[a1]) / statistics.median(times[a0])
        lines += [
            f"First batch with real Ray actors (embedded Ray on {nodes}, HybridLoader's Ray lane, "
            f"{args.ray_rounds} alternating rounds after a warm-up):\n",
            *h.markdown_table(["actors", "seconds to the first batch, per round", "median"], rows),
            "",
            f"first batch at {a1} / at {a0} actor(s): {ratio:.2f}x (goal <= 2: "
            f"{'met' if ratio <= 2 else '**NOT MET**'})",
            "",
        ]
        doc.update(first_batch_s={str(k): v for k, v in times.items()}, first_batch_ratio=ratio)
    h.emit(lines, args, doc, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
