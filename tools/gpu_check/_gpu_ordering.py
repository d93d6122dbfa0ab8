"""gpu_check's ``ordering`` section: the torch engine's batches do not change when its stream is stalled.

torchvision's batched CUDA decode writes its outputs on a private stream that does not wait
for the caller's (torchvision PR #9606). A lane whose previous batch's kernels are still
queued on its stream could have the memory they read handed to the next decode and
overwritten; ``torch_lane.wait_until_idle`` before each decode prevents it.

The test uses the lane exactly as the loader builds it (``host_sync=False``, uint8 out: the
host never waits for a batch), holds every batch's ops up on the lane's stream
(``torch.cuda._sleep``: the GPU spins, the host runs on), and compares each batch with an
unstalled run of the same lane: exact equality (the same decoder on the same GPU; decoder
rounding against the CPU lane is the tolerance section's business). The control repeats the
stalled run with the wait removed, up to ``tries`` times, and says whether it corrupted a
batch or that the hazard did not appear in that many tries.

The stall, the final synchronisation and the switch that removes the wait are arguments,
so the logic is tested where CUDA is absent (a fake stream that defers queued work).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from hybridload.lanes.base import BatchTask
from hybridload.lanes.gpu import torch_lane as torch_lane_module

SLEEP_CYCLES = 20_000_000  # about 10 ms of spinning per batch on an H100


@contextlib.contextmanager
def without_the_wait():
    """The torch engine with its wait before each decode removed (the control)."""
    real = torch_lane_module.wait_until_idle
    torch_lane_module.wait_until_idle = lambda stream: None
    try:
        yield
    finally:
        torch_lane_module.wait_until_idle = real


def cuda_stall(lane, cycles: int = SLEEP_CYCLES):
    """Hold each batch's ops up on the lane's stream (queued ahead of them; the host does not wait)."""
    real = lane._augment

    def stalled(task, batch, decoded):
        torch.cuda._sleep(cycles)
        return real(task, batch, decoded)

    lane._augment = stalled


def _run(make_lane, tasks, stall, sync) -> list[torch.Tensor]:
    lane = make_lane()
    try:
        if stall is not None:
            stall(lane)
        results = [lane.run_batch(t) for t in tasks]  # no host wait between batches
        sync(lane)
        return [r.images.cpu().clone() for r in results]
    finally:
        lane.close()


def _differing(a: list[torch.Tensor], b: list[torch.Tensor]) -> list[int]:
    return [k for k, (x, y) in enumerate(zip(a, b)) if x.shape != y.shape or not torch.equal(x, y)]


def stalled_ordering(
    make_lane, n_images: int, bs: int, *, stall, sync, unguarded=without_the_wait, batches: int = 8, tries: int = 3
) -> dict:
    """The section: a stalled run of the lane equal to an unstalled one, batch for batch; the control."""
    tasks = [BatchTask(k, 0, np.arange(k * bs, (k + 1) * bs) % n_images) for k in range(batches)]
    reference = _run(make_lane, tasks, None, sync)
    stalled = _run(make_lane, tasks, stall, sync)
    bad = _differing(reference, stalled)
    control, corrupted_at = None, None
    for attempt in range(1, tries + 1):
        with unguarded():
            wrong = _differing(reference, _run(make_lane, tasks, stall, sync))
        if wrong:
            control, corrupted_at = f"corrupting: {len(wrong)} of {batches} batches differ (try {attempt})", attempt
            break
    if control is None:
        control = f"hazard not seen in {tries} tries"
    return {
        "status": "fail" if bad else "ok",
        "batches": batches,
        "equal_batches": batches - len(bad),
        "differing_batches": bad,
        "control": control,
        "control_corrupted_on_try": corrupted_at,
        "tries": tries,
        **({"reason": f"batches {bad} changed under a stalled stream"} if bad else {}),
    }
