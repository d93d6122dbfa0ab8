"""The model fitted to the loader measured for real, so prediction and measurement agree.

``hybridload profile`` measures each lane on its own (the CPU kernels on the trainer's
threads, the GPU lane batch by batch), solves, then runs the real loader at a few GPU
shares. The loader at share 1 is the GPU lane as it really runs (pipelined, with every
core it takes), which a batch-by-batch reading can under- or overstate by a factor of two;
solving from one and reporting the other made the profile contradict itself. So the checked
points set the model's rates (`calibrate`), the plan is solved again from them, and
`predict_check` is the model's figure for what a check measured: on the points that
set the rates it equals the measurement.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from hybridload.planner.inputs import Limits, Measurements
from hybridload.planner.solver import predict

#: the least GPU time a check is taken to have had (an NVML reading near 100 % busy would
#: otherwise blow the fitted rate up)
MIN_GPU_PART = 0.05


def calibrate(m: Measurements, points: Sequence[tuple[float, float]]) -> Measurements:
    """``m`` with its rates set from the loader measured at GPU shares 0 and 1, where measured.

    Share 0 (the local CPU lane on the trainer node's threads) sets that node's rate per
    core. Share 1 (the GPU lane alone) sets the GPU lane's rate; the trainer cores it takes
    scale with it (the same cores per image). Other shares are left to check the model.

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
    """The model's images/s for a check of the loader at ``share``: what the profiler runs,
    the trainer node's lanes alone (no remote actors) with no demand and no
    ``max_gpu_util`` cap (the check enforces neither).

    Args:
        m: the (calibrated) measurements.
        lim: the plan's limits (their lane preference is kept).
        share: the GPU share checked.
    """
    local = replace(m, nodes=tuple(n for n in m.nodes if n.is_trainer))
    return predict(local, Limits(max_gpu_util=1.0, demand=None, prefer=lim.prefer), share)["total"]
