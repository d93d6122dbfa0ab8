"""The seed has one mechanism: a pass's seed (and epoch) travels on its tasks, never in a lane
that other passes share. One lane serves tasks of different seeds, each batch keyed by its own
(the CPU lanes bit-identical to the CPU kernels; the torch engine's host preparation draws
the same parameters); a HybridLoader's pass finishes its batches with its own epoch and seed,
also when ``set_epoch`` is called while it runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hybridload import HybridLoader, LoaderPolicy, recipe as R, sources
from hybridload._kernels import decode_image
from hybridload.lanes._cpu_job import process_batch
from hybridload.lanes._base import BatchTask

REC = R.make(
    [
        R.Decode(),
        R.RandomResizedCrop(32),
        R.HorizontalFlip(),
        R.ColorJitter(0.4, 0.4, 0.4),
        R.Normalize(),
        R.RandomErasing(p=0.9, value="random"),
    ]
)
IDX = np.arange(6)


def _cpu_lane(kind, src):
    if kind == "threads":
        from hybridload.lanes._local.inprocess import InProcessLane

        return InProcessLane(src, REC, threads=2)
    from hybridload.lanes._local.process import ProcessLane

    return ProcessLane(src, REC, workers=1, batch_size=len(IDX))


def _run(lane, task, timeout_s=120.0):
    """``task``'s result through the lane's asynchronous path (submit/done), as the dispatcher runs it."""
    import threading

    got, arrived = [], threading.Event()
    lane.submit(task, lambda t, out: (got.append(out), arrived.set()))
    assert arrived.wait(timeout_s), f"no result within {timeout_s} s"
    if isinstance(got[0], BaseException):
        raise got[0]
    return got[0]


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_one_cpu_lane_keys_each_task_by_the_seed_it_carries(photo_root, kind):
    src = sources.ImageFolder(photo_root)
    lane = _cpu_lane(kind, src)
    try:
        for seq, seed in enumerate((3, 8, 3)):
            got = _run(lane, BatchTask(seq, 1, IDX, size=len(IDX), seed=seed)).images
            want = process_batch(src, REC, IDX, seed, 1).images
            assert torch.equal(got, want), f"task {seq} (seed {seed}) was not keyed by its own seed"
    finally:
        lane.close()


def test_the_torch_engine_prepares_each_task_with_the_seed_it_carries(photo_root):
    from hybridload.lanes._gpu.torch_lane import TorchGpuLane

    src = sources.ImageFolder(photo_root)

    def cpu_decode(datas):
        return [torch.from_numpy(decode_image(d.numpy().tobytes())).permute(2, 0, 1) for d in datas]

    lane = TorchGpuLane(src, REC, batch_size=len(IDX), device=torch.device("cpu"), decode=cpu_decode)
    try:
        a, b = (lane.run_batch(BatchTask(0, 1, IDX, seed=s)) for s in (3, 8))
        again = lane.run_batch(BatchTask(1, 1, IDX, seed=3))
    finally:
        lane.close()
    assert torch.equal(a.images, again.images) and not torch.equal(a.images, b.images)


def test_a_pass_finishes_its_batches_with_its_own_epoch_when_set_epoch_is_called_mid_pass(photo_root):
    src = sources.ImageFolder(photo_root)

    def loader():
        return HybridLoader(src, REC, 6, policy=LoaderPolicy(cpu_actors=0, threads=2), seed=4, device="cpu")

    with loader() as ld:
        ld.set_epoch(2)
        whole = [images for images, _ in ld]
    with loader() as ld:
        ld.set_epoch(2)
        it = iter(ld)
        got = [next(it)[0]]
        ld.set_epoch(3)  # the next pass's epoch: the running pass keeps its own
        got += [images for images, _ in it]
    assert len(got) == len(whole)
    assert all(torch.equal(a, b) for a, b in zip(got, whole)), "a batch of the pass was finished with another epoch"
