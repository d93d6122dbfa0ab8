"""gpu_check's ``ordering`` section: the torch engine's batches stay right while its stream is stalled.

torchvision's batched CUDA decode writes its outputs on a private stream that does not wait
for the caller's stream (torchvision PR #9606). Here every batch's ops are held up on the
lane's stream by ``torch.cuda._sleep`` (the GPU spins, the host does not wait), so the next
decode starts while the previous batch's kernels are still queued: if the lane did not wait
for its stream to be idle before decoding (``torch_lane.wait_until_idle``), a decode could
overwrite memory those kernels are about to read. Every batch is compared with the CPU lane's
pixels for the same indices. A control run with the wait switched off says whether this GPU
shows the hazard at all (informative; only the guarded run decides the status).

It replaces the TORCH_CUDA_SANITIZER child, which was blind here: the sanitizer installs
per-thread dispatch modes, and the lane's work runs in a pool thread it never saw.
"""

from __future__ import annotations

import numpy as np
import torch

from hybridload.kernels import process_batch
from hybridload.lanes.base import BatchTask
from hybridload.lanes.gpu import torch_lane as torch_lane_module

TOLERANCE = 0.5  # mean grey levels, the stated tolerance of a GPU engine against the CPU lane


def _run(make_lane, src, rec, bs, batches: int, cycles: int) -> float:
    """The largest per-batch mean |diff| against the CPU lane, with each batch's ops stalled."""
    lane = make_lane()
    real = lane._augment

    def stalled(task, batch, decoded):
        torch.cuda._sleep(cycles)          # queued on the lane's stream, ahead of the batch's ops
        return real(task, batch, decoded)

    lane._augment = stalled
    try:
        tasks = [BatchTask(k, 0, np.arange(k * bs, (k + 1) * bs) % len(src)) for k in range(batches)]
        results = [lane.run_batch(t) for t in tasks]   # no host wait between batches
        torch.cuda.synchronize()
        worst = 0.0
        for task, res in zip(tasks, results):
            want = process_batch(src, rec, task.indices, 0, 0).images
            worst = max(worst, (res.images.cpu().int() - want.int()).abs().float().mean().item())
        return worst
    finally:
        lane.close()


def stalled_ordering(make_lane, src, rec, bs: int, batches: int = 8, cycles: int = 20_000_000) -> dict:
    """The section: the guarded lane against the CPU lane under stalls, and the unguarded control."""
    guarded = _run(make_lane, src, rec, bs, batches, cycles)
    real_wait = torch_lane_module.wait_until_idle
    torch_lane_module.wait_until_idle = lambda stream: None
    try:
        control = _run(make_lane, src, rec, bs, batches, cycles)
    finally:
        torch_lane_module.wait_until_idle = real_wait
    return {"status": "ok" if guarded <= TOLERANCE else "fail", "batches": batches, "sleep_cycles": cycles,
            "mean_abs_diff_max": guarded, "tolerance": TOLERANCE,
            "control_without_wait_mean_abs_diff_max": control,
            "hazard_seen_without_wait": control > TOLERANCE}
