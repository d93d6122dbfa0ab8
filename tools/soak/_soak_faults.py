"""The soak's fault schedule (a pure function of the seed) and the injectors that carry it out.

A schedule is a list of lives: each life is one run of the trainer job (its lanes, its world
size) and the faults injected during it, each ``gap`` training steps after the previous one
plus ``delay`` seconds (``gap`` 0: ``delay`` seconds after the job starts, while it imports,
resumes from its checkpoint and connects); every life but the last ends with the trainer
SIGKILLed, and the next starts from the last checkpoint, on the lanes and world size it draws.
"""

from __future__ import annotations

import logging
import math
import os
import random
import time

from _soak_world import NodeStartFailed, children_of, cmdline, kill

log = logging.getLogger("soak")

LANES = ("threads", "processes", "ray", "gpu")
WORLDS = (1, 2, 3)
#: the lanes a fault needs the trainer to run
NEEDS = {
    "worker_kill": "processes",
    "actor_kill": "ray",
    "actor_kill_starting": "ray",
    "node_removed": "ray",
    "node_added": "ray",
    "gpu_fault": "gpu",
}
KINDS = (
    "trainer_kill",
    "worker_kill",
    "actor_kill",
    "actor_kill_starting",
    "node_removed",
    "node_added",
    "storage_stopped",
    "gpu_fault",
)


def draw_schedule(
    seed: int, faults: int, kinds: tuple[str, ...] | None = None, worlds: tuple[int, ...] = WORLDS
) -> list[dict]:
    """``faults`` faults drawn from ``seed`` (among ``kinds``, default all; a trainer kill ends a
    life whose lanes the next fault cannot hit):
    [{"lanes", "world", "faults": [{"kind", "gap", "delay"}, ...]}, ...]."""
    kinds = tuple(kinds or KINDS)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown fault kinds {sorted(unknown)}; choose among {', '.join(KINDS)}")
    rng = random.Random(seed)
    first = sorted({NEEDS[k] for k in kinds if k in NEEDS}) if all(k in NEEDS for k in kinds) else LANES
    lives = [{"lanes": rng.choice(first), "world": min(2, max(worlds)), "faults": []}]
    count = 0
    while count < faults:
        kind = rng.choice(kinds)
        life = lives[-1]
        if kind == "trainer_kill" and len(kinds) > 1 and rng.random() < 0.5:
            kind = rng.choice(kinds)  # half as likely: a kill restarts the whole job (the slowest fault)
        need = NEEDS.get(kind)
        fits = [k for k in kinds if k != "trainer_kill" and NEEDS.get(k) in (None, life["lanes"])]
        if need is not None and need != life["lanes"] and fits and rng.random() < 0.9:
            kind = rng.choice(fits)  # fewer kills only to change lanes
            need = NEEDS.get(kind)
        if kind == "actor_kill_starting" and life["faults"]:
            kind = "actor_kill"  # "while starting" is the first thing in a life
        if kind == "trainer_kill" or (need is not None and need != life["lanes"]):
            if not life["faults"] and len(lives) > 1 and rng.random() < 0.3:  # while the job resumes
                life["faults"].append({"kind": "trainer_kill", "gap": 0, "delay": round(rng.uniform(0.5, 8.0), 1)})
            else:
                life["faults"].append(
                    {"kind": "trainer_kill", "gap": rng.randint(1, 4), "delay": round(rng.random() * 0.5, 2)}
                )
            count += 1
            lives.append({"lanes": need or rng.choice(LANES), "world": rng.choice(worlds), "faults": []})
            if kind == "trainer_kill" or count >= faults:
                continue
            life = lives[-1]
            if life["lanes"] == "ray" and "actor_kill_starting" in kinds and rng.random() < 0.5:
                kind = "actor_kill_starting"  # the new job's actors killed while they start
        gap = 0 if kind == "actor_kill_starting" else rng.randint(1, 4)
        extra = {"seconds": round(rng.uniform(1.5, 4.0), 1)} if kind == "storage_stopped" else {}
        life["faults"].append({"kind": kind, "gap": gap, "delay": round(rng.random() * 0.5, 2), **extra})
        count += 1
    return lives


def describe(lives: list[dict]) -> str:
    lines = []
    for k, life in enumerate(lives):
        faults = ", ".join(f"{f['kind']}@+{f['gap']}" for f in life["faults"]) or "-"
        lines.append(f"  life {k}: lanes={life['lanes']} world={life['world']}: {faults}")
    return "\n".join(lines)


#: faults the driver waits out while the job trains on the batches in flight (the storage stopped;
#: the GPU lane meets its armed fault only at its next decode)
WAITED_OUT = ("storage_stopped", "gpu_fault")


def landing_steps(fault: dict, step_s: float, window: int) -> int:
    """The most training steps between a fault's drawn step and the step its recovery waits for.

    The driver sleeps the fault's ``delay`` once the drawn step is reached, and the job trains on:
    at most ``ceil(delay / step_s)`` steps, as every step sleeps ``step_s``. A stopped S3 server or
    an armed GPU fault is waited out while the job trains on the loader's ``window`` batches in
    flight. Then the recovery waits for one more step. The next fault's drawn step counts from
    this one's drawn step, so a landing longer than the next gap carries over to it."""
    waited = window if fault["kind"] in WAITED_OUT else 0
    return math.ceil(round(fault["delay"] / step_s, 6)) + waited + 1  # round: 0.2 / 0.05 is 4, not 4.000...1


def steps_needed(lives: list[dict], step_s: float, window: int) -> int:
    """Training steps the schedule spans, at most: in each life, the job's first step (2: the step
    the driver first sees may be the second), then each fault's gap and landing
    (`landing_steps`). A trainer kill's replay is not counted: the resumed job's step count
    restarts at its checkpoint (up to ``save_every`` steps back), so a replay gives steps back to
    the schedule rather than taking any."""
    faults = [f for life in lives for f in life["faults"]]
    return 2 * len(lives) + sum(f["gap"] + landing_steps(f, step_s, window) for f in faults)


# ------------------------------------------------------------------ injectors


def _wait_for(find, timeout: float, done=lambda: False):
    """What ``find`` finds within ``timeout``; None once ``done()`` says the job ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done():
        got = find()
        if got:
            return got
        time.sleep(0.05)
    return None


def worker_pids(trainer_pids: list[int]) -> list[int]:
    """The process lane's workers: the trainers' children other than Python's helpers."""
    return [
        p
        for t in trainer_pids
        for p in children_of(t)
        if "resource_tracker" not in cmdline(p) and "forkserver" not in cmdline(p) and cmdline(p)
    ]


def actor_pids(raylets: list[int]) -> list[int]:
    """Ray worker processes running an actor (their title is ``ray::Class...``; ``ray::IDLE`` waits)."""

    def is_actor(title: str) -> bool:
        name = title[5:].split(".")[0].split(" ")[0]
        return title.startswith("ray::") and name != "IDLE" and not name.endswith("Agent")

    return [p for r in raylets for p in children_of(r) if is_actor(cmdline(p))]


def inject(
    kind: str, fault: dict, *, rng: random.Random, trainers: list[int], run_dir, cluster, storage, done=lambda: False
) -> str:
    """Carry out one fault; what was done, in words ("" when there was nothing to hit, or when
    ``done()`` says the job ended while the fault waited for its target)."""
    if kind == "trainer_kill":
        pid = rng.choice(trainers)
        kill(pid)
        return f"SIGKILL trainer pid {pid}"
    if kind == "worker_kill":
        pids = _wait_for(lambda: worker_pids(trainers), 20, done)
        if not pids:
            return ""
        pid = rng.choice(pids)
        kill(pid)
        return f"SIGKILL worker pid {pid}"
    if kind in ("actor_kill", "actor_kill_starting"):
        # while starting: until the job (a few processes importing torch on a loaded machine) makes its actors
        pids = _wait_for(lambda: actor_pids(cluster.raylet_pids()), 240 if kind == "actor_kill_starting" else 30, done)
        if not pids:
            titles = sorted({cmdline(p)[:40] for r in cluster.raylet_pids() for p in children_of(r)})
            log.info("no actor process among the raylets' children: %s", titles)
            return ""
        pid = rng.choice(pids)
        title = cmdline(pid)
        return f"SIGKILL actor pid {pid} ({title})" if kill(pid) else ""
    if kind == "node_removed":
        if not cluster.workers:
            return "no worker node to remove: one added" if _added(cluster) else ""
        cluster.remove(rng.randrange(len(cluster.workers)))
        return f"node removed ({len(cluster.workers)} worker nodes left)"
    if kind == "node_added":
        if len(cluster.workers) >= 3:
            cluster.remove(0)
            return "3 worker nodes already: one removed"
        return f"node added ({len(cluster.workers)} worker nodes)" if _added(cluster) else ""
    if kind == "storage_stopped":
        storage.stop_for(fault["seconds"])
        return f"S3 server stopped {fault['seconds']} s"
    if kind == "gpu_fault":
        rank = rng.randrange(len(trainers))
        (run_dir / f"gpu-fault-{rank}").touch()
        return f"device fault armed on rank {rank}'s GPU lane"
    raise ValueError(f"unknown fault kind {kind!r}")


def _added(cluster) -> bool:
    """Add a worker node; False (logged, the fault not counted) when Ray gave up on its start."""
    try:
        cluster.add()
    except NodeStartFailed as e:
        log.warning("%s; the fault is not counted", e)
        return False
    return True


def done_kind(kind: str, what: str) -> str:
    """The kind of what was done: a node removal that found none added one, and the reverse."""
    if kind == "node_removed" and what.endswith("one added"):
        return "node_added"
    if kind == "node_added" and what.endswith("one removed"):
        return "node_removed"
    return kind


def remove_flags(run_dir) -> None:
    for p in run_dir.glob("gpu-fault-*"):
        os.unlink(p)
