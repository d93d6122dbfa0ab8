"""The soak's watch on the job's Ray pools, read from what each rank's trainer writes with its
progress (ready and target actors, seconds without a ready actor, lost actors, failed starts):
how long each actor kill took until every pool noticed it and was back at its target, and each
pool life's time without a ready actor while it had a target, apart from its time at target 0
(no slot for its rank: the local lane carries its batches, by design)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path


def losses(pools: list[dict]) -> int:
    """The pools' lost actors and failed starts, all ranks together: an actor kill is noticed
    once this count passes the one before it."""
    return sum(p["lost"] + p["failed_starts"] for p in pools)


def progress_file(rank: int) -> str:
    """The name of the file rank ``rank``'s trainer writes its progress and its pool to."""
    return f"progress-{rank}.json"


def back(pools: list[dict]) -> bool:
    """Every pool with a target above 0 is back at it (``live >= target``), and one has such a
    target. A pool at target 0 has no slot for its rank: nothing to recover, so not timed."""
    timed = [p for p in pools if p["target"] > 0]
    return bool(timed) and all(p["live"] >= p["target"] for p in timed)


def pool_times(readings: Sequence[tuple[float, int, int]]) -> tuple[float, float]:
    """One pool's ``(time, target, live)`` readings in time order, each holding until the next:
    (seconds without a ready actor while its target was above 0, seconds at target 0)."""
    without = at_zero = 0.0
    for (t, target, live), (t_next, _, _) in zip(readings, readings[1:]):
        if target == 0:
            at_zero += t_next - t
        elif live == 0:
            without += t_next - t
    return without, at_zero


class PoolWatch:
    """The actor kills of a life not yet timed, and every pool life's seconds without a ready
    actor while it had a target, and at target 0, from the readings the watch takes."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        # (the kill's event, losses before it, time.time(), its pool's progress file or None: every pool)
        self.open_kills: list[tuple[dict, int, float, str | None]] = []
        self.readings: dict[str, list[tuple[float, int, int]]] = {}  # per progress file: (monotonic, target, live)
        self.empty_s: list[float] = []  # each rank's pool, each life: without a ready actor, target above 0
        self.zero_target_s: list[float] = []  # the same pools and lives: at target 0

    def pools(self) -> list[dict]:
        """Each rank's Ray pool as its last step wrote it (ranks without one, or no step yet, left out)."""
        return list(self._read().values())

    def losses_now(self) -> dict[str, int]:
        """Each rank's pool's `losses`, by its progress file's name, and all of them under ``""``."""
        read = self._read()
        return {"": losses(list(read.values())), **{name: losses([p]) for name, p in read.items()}}

    def _read(self) -> dict[str, dict]:
        out = {}
        for p in sorted(self.run_dir.glob("progress-*.json")):
            try:
                pool = json.loads(p.read_text()).get("pool")
            except (OSError, ValueError):
                continue
            if pool:
                out[p.name] = pool
        return out

    def opened(self, event: dict, before: dict[str, int] | int, t_wall: float, rank: int | None = None) -> None:
        """An actor kill to time (``event`` gets its ``pool_recovery_s``): on the pool of
        ``rank``, the rank whose actor was killed, or, when that is not known (None), on every
        pool. ``before``: `losses_now` before the kill (or the pools' `losses`)."""
        counts = before if isinstance(before, dict) else {"": before}
        name = None if rank is None else progress_file(rank)
        self.open_kills.append((event, counts.get(name or "", 0), t_wall, name))

    def watch(self, ranks: int) -> None:
        """Time each actor kill still open: done once its rank's pool has noticed it (its
        `losses` passed the count before the kill) and is back at its target (a kill whose rank
        is not known: once a pool noticed it and every one of the ``ranks`` pools is back).
        Watched as the soak goes on, so the next fault keeps its drawn moment (a kill may hit a
        replacement still starting: its kill is back once the next start is). Each look is also
        a reading of every pool's target and ready actors."""
        read, now_s = self._read(), time.monotonic()
        for name, p in read.items():
            self.readings.setdefault(name, []).append((now_s, p["target"], p["live"]))
        pools = list(read.values())
        if not self.open_kills:
            return
        every = len(pools) >= ranks and back(pools)
        still = []
        for kill in self.open_kills:
            event, before, t_wall, name = kill
            if name is None:
                done = every and losses(pools) > before
            else:
                pool = read.get(name)
                done = pool is not None and losses([pool]) > before and back([pool])
            if done:
                event["pool_recovery_s"] = round(time.time() - t_wall, 3)
            else:
                still.append(kill)
        self.open_kills = still

    def keep(self, ranks: int) -> None:
        """The life ends: a last look, the kills its pools were not back from left untimed (None),
        and its pools' time without a ready actor (target above 0) and at target 0 kept."""
        self.watch(ranks)
        for event, *_ in self.open_kills:
            event["pool_recovery_s"] = None
        self.open_kills = []
        for readings in self.readings.values():
            if len(readings) > 1:
                without, at_zero = pool_times(readings)
                self.empty_s.append(round(without, 3))
                self.zero_target_s.append(round(at_zero, 3))
        self.readings = {}


#: an actor kill's steps in Ray's timings, in order: the killed actor marked dead in Ray's GCS,
#: then its replacement's start as `_soak_world.actor_starts_from` names its steps
RAY_STEPS = ("dead", "asked", "worker", "running", "created", "ready")


def killed_pid(what: str) -> int | None:
    """The pid an actor kill's description names ("SIGKILL actor pid 123 (ray::...)")."""
    words = what.split()
    return int(words[3]) if words[:3] == ["SIGKILL", "actor", "pid"] and words[3:4] and words[3].isdigit() else None


def ray_steps(events: list[dict], starts: list[dict]) -> None:
    """Give each actor kill among ``events`` its replacement's start in Ray's timings
    (``ray_steps``: seconds from the kill to each of `RAY_STEPS`, None where not reached, the
    first, ``dead``, the killed actor's end in Ray's GCS; the replacement's ``actor`` name).
    The killed actor is the one whose worker had the pid the kill names, its replacement the
    first other actor of the same pool (its name less the last ``-key``) whose creation was
    asked at or after the kill. A kill whose actor Ray did not record, or whose pool asked for
    none while the cluster lived, gets ``ray_steps`` None."""
    for e in events:
        if not e["kind"].startswith("actor_kill"):
            continue
        pid, at = killed_pid(e["what"]), e["at"]
        killed = [s for s in starts if pid is not None and s["pid"] == pid and (s["asked"] or 0) <= at]
        if not killed:
            e["ray_steps"] = None
            continue
        victim = max(killed, key=lambda s: s["asked"] or 0)
        pool = victim["name"].rsplit("-", 1)[0]
        # (the kill's time is read just after the SIGKILL; a clock read late by that much is allowed)
        after = [
            s
            for s in starts
            if s is not victim and s["name"].rsplit("-", 1)[0] == pool and (s["asked"] or 0) >= at - 0.05
        ]
        if not after:
            e["ray_steps"] = None
            continue
        new = dict(min(after, key=lambda s: s["asked"]), dead=victim["died"])
        e["ray_steps"] = {k: None if new[k] is None else round(new[k] - at, 3) for k in RAY_STEPS}
        e["ray_steps"]["actor"] = new["name"]
