"""Which lanes a loader runs, as data: a pure function of the policy and the plan.

==========  ===========================  =====================  =====================
mode        GPU lane                     its share cap          CPU lane
==========  ===========================  =====================  =====================
"cpu"       none                         —                      primary
"gpu"       yes                          none (takes all)       CPU_LOCAL stand-by
"split"     when the share > 0           policy, else plan      primary
"auto"      yes                          start: policy, plan,   primary
                                         else 0.5; re-planned
==========  ===========================  =====================  =====================

A stand-by lane takes only what the GPU lane fails or reroutes. When the GPU lane cannot
be built, the CPU lane becomes the primary lane. The CPU lane is CPU_LOCAL (threads in
this process, no Ray) with ``cpu_actors=0`` or when Ray is not installed, else CPU_ACTORS.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .base import LaneKind


@dataclass(frozen=True)
class LaneSpec:
    """Attributes:
        gpu: build a GPU lane.
        gpu_cap: the GPU lane's share cap (0..1); None: uncapped.
        auto: re-plan the cap online from live lane rates.
        cpu: the kind of the CPU lane.
        cpu_standby: with a working GPU lane, the CPU lane is a local stand-by for failures only.
        notes: things the user should hear (logged as warnings by the loader).
    """

    gpu: bool
    gpu_cap: float | None
    auto: bool
    cpu: LaneKind
    cpu_standby: bool = False
    notes: tuple[str, ...] = ()

    @property
    def start_share(self) -> float:
        """The GPU share the loader starts with (for reporting)."""
        if not self.gpu:
            return 0.0
        return 1.0 if self.gpu_cap is None else self.gpu_cap


def plan_lanes(policy, plan=None, *, ray_installed: bool = True) -> LaneSpec:
    """The lanes for ``policy`` (a LoaderPolicy) and an optional ``plan`` (a Plan)."""
    notes: list[str] = []
    if policy.cpu_actors == 0:
        cpu = LaneKind.CPU_LOCAL
    elif policy.cpu_actors is None and not ray_installed:
        cpu = LaneKind.CPU_LOCAL
        notes.append("Ray is not installed: running the in-process lane (pip install 'hybridload[ray]' "
                     "for Ray CPU actors; set cpu_actors=0 to silence this)")
    else:
        cpu = LaneKind.CPU_ACTORS
    if policy.mode == "gpu":
        return LaneSpec(gpu=True, gpu_cap=None, auto=False, cpu=cpu, cpu_standby=True, notes=tuple(notes))
    if policy.mode == "split":
        share = policy.gpu_share if policy.gpu_share is not None else plan.gpu_share
        return LaneSpec(gpu=share > 0, gpu_cap=share, auto=False, cpu=cpu, notes=tuple(notes))
    if policy.mode == "auto":
        share = policy.gpu_share if policy.gpu_share is not None else (plan.gpu_share if plan is not None else 0.5)
        return LaneSpec(gpu=True, gpu_cap=share, auto=True, cpu=cpu, notes=tuple(notes))
    return LaneSpec(gpu=False, gpu_cap=None, auto=False, cpu=cpu, notes=tuple(notes))


class LaneCaps:
    """The share cap of each lane kind (0..1; absent: uncapped), with its own lock: the
    online planner writes it while the dispatcher reads it."""

    def __init__(self, caps: dict[LaneKind, float] | None = None):
        self._lock = threading.Lock()
        self._caps = dict(caps or {})

    def get(self, kind: LaneKind) -> float | None:
        with self._lock:
            return self._caps.get(kind)

    def set(self, kind: LaneKind, share: float) -> None:
        with self._lock:
            self._caps[kind] = float(share)

    def snapshot(self) -> dict[LaneKind, float]:
        with self._lock:
            return dict(self._caps)
