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
        self.open_kills: list[tuple[dict, int, float]] = []  # (the kill's event, losses before it, time.time())
        self.readings: dict[str, list[tuple[float, int, int]]] = {}  # per progress file: (monotonic, target, live)
        self.empty_s: list[float] = []  # each rank's pool, each life: without a ready actor, target above 0
        self.zero_target_s: list[float] = []  # the same pools and lives: at target 0

    def pools(self) -> list[dict]:
        """Each rank's Ray pool as its last step wrote it (ranks without one, or no step yet, left out)."""
        return list(self._read().values())

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

    def opened(self, event: dict, before: int, t_wall: float) -> None:
        """An actor kill to time (``event`` gets its ``pool_recovery_s``); ``before``: `losses` before it."""
        self.open_kills.append((event, before, t_wall))

    def watch(self, ranks: int) -> None:
        """Time each actor kill still open: done once a rank's pool has noticed it and every one
        of the ``ranks`` pools is back at its target. Watched as the soak goes on, so the next
        fault keeps its drawn moment (a kill may hit a replacement still starting). Each look is
        also a reading of every pool's target and ready actors."""
        read, now_s = self._read(), time.monotonic()
        for name, p in read.items():
            self.readings.setdefault(name, []).append((now_s, p["target"], p["live"]))
        pools = list(read.values())
        if not self.open_kills or len(pools) < ranks or not back(pools):
            return
        now = losses(pools)
        for event, _, t_wall in [o for o in self.open_kills if now > o[1]]:
            event["pool_recovery_s"] = round(time.time() - t_wall, 3)
        self.open_kills = [o for o in self.open_kills if now <= o[1]]

    def keep(self, ranks: int) -> None:
        """The life ends: a last look, the kills its pools were not back from left untimed (None),
        and its pools' time without a ready actor (target above 0) and at target 0 kept."""
        self.watch(ranks)
        for event, _, _ in self.open_kills:
            event["pool_recovery_s"] = None
        self.open_kills = []
        for readings in self.readings.values():
            if len(readings) > 1:
                without, at_zero = pool_times(readings)
                self.empty_s.append(round(without, 3))
                self.zero_target_s.append(round(at_zero, 3))
        self.readings = {}
