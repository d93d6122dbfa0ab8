"""The soak job's agreed early stop: the job runs at most the epochs `soak.epochs_for` sizes
(a strict bound, about 3x what a schedule needs where a step takes 0.1 s against ``--step-s
0.03``), and ends sooner once the driver has seen its last fault over.

The driver writes ``stop.json`` in the run's folder with the last epoch to train (`stop_epoch`):
the epoch whose end comes next plus ``ENDS_AFTER_CALM - 1``, so a trainer has at least 2 epoch
ends after the last fault (the file-descriptor check, `_soak_check.fd_growth`, reads growth
between them) even when the progress it read lags an epoch behind. Rank 0 reads the file at each
epoch's start and shares the decision with every rank (`agreed_stop`), so all ranks leave at
the same epoch end and none waits in a collective the others left. The file stays through a
restart: a resumed job reads it the same way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

STOP_FILE = "stop.json"
#: epoch ends a trainer runs after the driver saw the last fault over (3: at least 2 for
#: `_soak_check.fd_growth` when the progress read lags an epoch behind)
ENDS_AFTER_CALM = 3
#: seconds the driver waits for the Ray pools to be back at their target after the last fault
#: before it asks for the stop anyway: the Ray CI soak's pools were not back at all while its
#: job ran (seed 14 on a loaded machine), and a pool back after the ask moves the stop later.
#: A soak that times the pools' return waits longer (``soak.py --pool-wait-s``): a kill whose
#: pool is not back when the job ends is never timed
POOL_WAIT_S = 3.0


class StopAsk:
    """When the driver asks the job to stop, and for which epoch (no I/O: the driver feeds it
    what it reads). Asks once the Ray pools are back from the actor kills (their return moves
    the moment the last fault is over: `_soak_check.calm_since`) or ``POOL_WAIT_S`` after the
    last fault recovered; asks again, later, when a pool comes back after the ask; never asks
    an earlier epoch than before."""

    def __init__(self, pool_wait_s: float = POOL_WAIT_S) -> None:
        self.pool_wait_s = pool_wait_s
        self.asked: int | None = None  # the last epoch asked
        self.kills = 0  # the pools' open kills when asked

    def update(self, epoch: int, *, open_kills: int, waited_s: float) -> int | None:
        """The last epoch to ask the job to train now, or None to ask nothing (new).

        ``epoch``: the epoch whose end rank 0 reaches next (-1 before its first step);
        ``open_kills``: actor kills whose pools are not back at their target yet;
        ``waited_s``: seconds since the last fault recovered."""
        came_back = self.asked is not None and open_kills < self.kills
        if epoch < 0 or (self.asked is not None and not came_back):
            return None
        if open_kills and waited_s < self.pool_wait_s:
            return None
        self.kills = open_kills
        last = epoch + ENDS_AFTER_CALM - 1
        if self.asked is not None and last <= self.asked:
            return None
        self.asked = last
        return last


def write_json(path: Path, obj) -> None:
    """Atomically: a SIGKILL mid-write leaves the previous file whole."""
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def request_stop(run_dir: Path, last_epoch: int) -> None:
    """Ask the job to stop after training epoch ``last_epoch`` (atomically: a reader never sees
    half a file)."""
    write_json(run_dir / STOP_FILE, {"last_epoch": last_epoch})


def requested(run_dir: Path) -> int | None:
    """The last epoch the driver asked the job to train; None when it asked nothing."""
    try:
        return int(json.loads((run_dir / STOP_FILE).read_text())["last_epoch"])
    except FileNotFoundError:
        return None


def agreed_stop(run_dir: Path, trained: int, rank: int, dist) -> bool:
    """Whether every rank stops now, having trained epochs 0..``trained``-1: rank 0 reads the
    driver's ask, the others take its answer (a broadcast every rank makes at the same point of
    each epoch; ``dist`` None for one rank)."""
    last = requested(run_dir) if rank == 0 else None
    stop = last is not None and trained > last
    if dist is None:
        return stop
    import torch

    flag = torch.tensor([int(stop)])
    dist.broadcast(flag, src=0)
    return bool(flag.item())
