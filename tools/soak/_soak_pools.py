"""The soak's watch on the job's Ray pools, read from what each rank's trainer writes with its
progress (ready and target actors, seconds without a ready actor, lost actors, failed starts):
how long each actor kill took until every pool noticed it and was back at its target, and each
pool life's time without a ready actor."""

from __future__ import annotations

import json
import time
from pathlib import Path


def losses(pools: list[dict]) -> int:
    """The pools' lost actors and failed starts, all ranks together: an actor kill is noticed
    once this count passes the one before it."""
    return sum(p["lost"] + p["failed_starts"] for p in pools)


class PoolWatch:
    """The actor kills of a life not yet timed, and every pool life's seconds without a ready actor."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.open_kills: list[tuple[dict, int, float]] = []  # (the kill's event, losses before it, time.time())
        self.empty_s: list[float] = []  # each rank's pool, each life

    def pools(self) -> list[dict]:
        """Each rank's Ray pool as its last step wrote it (ranks without one, or no step yet, left out)."""
        out = []
        for p in sorted(self.run_dir.glob("progress-*.json")):
            try:
                pool = json.loads(p.read_text()).get("pool")
            except (OSError, ValueError):
                continue
            if pool:
                out.append(pool)
        return out

    def opened(self, event: dict, before: int, t_wall: float) -> None:
        """An actor kill to time (``event`` gets its ``pool_recovery_s``); ``before``: `losses` before it."""
        self.open_kills.append((event, before, t_wall))

    def watch(self, ranks: int) -> None:
        """Time each actor kill still open: done once a rank's pool has noticed it and every one
        of the ``ranks`` pools is back at its target. Watched as the soak goes on, so the next
        fault keeps its drawn moment (a kill may hit a replacement still starting)."""
        if not self.open_kills:
            return
        pools = self.pools()
        if len(pools) < ranks or not all(p["live"] >= p["target"] > 0 for p in pools):
            return
        now = losses(pools)
        for event, _, t_wall in [o for o in self.open_kills if now > o[1]]:
            event["pool_recovery_s"] = round(time.time() - t_wall, 3)
        self.open_kills = [o for o in self.open_kills if now <= o[1]]

    def keep(self, ranks: int) -> None:
        """The life ends: a last look, the kills its pools were not back from left untimed (None),
        and its pools' time without a ready actor kept."""
        self.watch(ranks)
        for event, _, _ in self.open_kills:
            event["pool_recovery_s"] = None
        self.open_kills = []
        self.empty_s += [p["without_actors_s"] for p in self.pools()]
