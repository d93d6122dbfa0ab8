"""The model's rates set from the real loader's checked points, so the profile's prediction and
measurement agree (a lane measured alone can be off by 2x: docs/guide/planner.md)."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from hybridload.planner._inputs import Limits, Measurements
from hybridload.planner._solver import predict

#: the least GPU time a check is taken to have had: a reading near 100 % busy would blow the rate up
MIN_GPU_PART = 0.05


def calibrate(m: Measurements, points: Sequence[tuple[float, float]]) -> Measurements:
    """``m`` with the trainer node's rate per core set from share 0 and the GPU lane's rate (its
    cores per image kept) from share 1, where measured; other shares only check the model.

    Args:
        m: the measurements of the lanes on their own.
        points: ``(GPU share, images/s)`` the real loader delivered (this machine's lanes only).
    """
    at = {float(s): float(r) for s, r in points}
    if at.get(0.0, 0.0) > 0:
        m = replace(
            m, nodes=tuple(replace(n, per_core=at[0.0] / n.cpus) if n.is_trainer and n.cpus > 0 else n for n in m.nodes)
        )
    r1 = at.get(1.0, 0.0)
    if r1 > 0 and m.gpu_available and m.gpu_rate > 0:
        part = max(MIN_GPU_PART, 1.0 - m.gpu_util) if m.gpu_time_bound else 1.0  # the GPU time the check had
        rate = r1 / part
        note = (
            f"GPU lane: {r1:.0f} images/s in the loader at share 1 against {m.gpu_rate:.0f} run batch by "
            "batch; the model uses the loader's"
        )
        m = replace(m, gpu_rate=rate, gpu_cpu_cost=m.gpu_cpu_cost * rate / m.gpu_rate, notes=m.notes + (note,))
    return m


def predict_check(m: Measurements, lim: Limits, share: float) -> float:
    """The model's images/s for a check at ``share``, run as the profiler runs it: the trainer
    node's lanes alone, no demand, no ``max_gpu_util`` cap.

    Args:
        m: the (calibrated) measurements.
        lim: the plan's limits (their lane preference is kept).
        share: the GPU share checked.
    """
    local = replace(m, nodes=tuple(n for n in m.nodes if n.is_trainer))
    return predict(local, Limits(max_gpu_util=1.0, demand=None, prefer=lim.prefer), share)["total"]
