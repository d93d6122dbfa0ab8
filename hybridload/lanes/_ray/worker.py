"""What every actor of an `ActorPool` does alike."""

from __future__ import annotations

import faulthandler
import logging
import os
from typing import IO

import torch

from hybridload import _compat as compat
from hybridload.lanes._ray.deaths import crash_file

log = logging.getLogger(__name__)


class PoolWorker:
    """The actor's common part: torch on one thread (it holds one CPU), a fatal signal recorded in a
    crash file of its own, and ``ready()``, naming the node it landed on. Subclasses add ``run``."""

    def __init__(self) -> None:
        torch.set_num_threads(1)
        self._crash_log = record_crashes()

    def ready(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


def record_crashes() -> IO[str] | None:
    """Have faulthandler write a fatal signal to this worker's crash file, not stderr, which user
    code may silence; Ray reports no signal itself
    (docs/decisions/deaths-two-crashes-or-four-kills.md). Returns the open file (keep it for the
    process's life), None outside a Ray node."""
    try:
        f = open(crash_file(compat.ray_node_logs_dir(), os.getpid()), "w")  # noqa: SIM115 (kept open: faulthandler's)
    except (OSError, RuntimeError) as exc:  # not in a Ray worker, or a log directory it cannot write
        log.debug("no crash file for this worker (%s): a fatal signal is read from its Ray log only", exc)
        return None
    faulthandler.enable(file=f, all_threads=False)
    return f
