"""What only a GPU shows about the GPU lane's behaviour in the loader:

* the consumer's loop (the copy to the device, Normalize, RandomErasing with random noise) makes
  no synchronising CUDA call on its thread (``torch.cuda.set_sync_debug_mode("warn")``);
* a device fault in a GPU engine after two batches breaks the lane, and the CPU lane finishes
  the stream, every batch once, in order;
* mode "auto" beside a training step keeps the GPU lane's share of the last batches above zero.
"""

from __future__ import annotations

import threading
import warnings

import pytest
import torch

from cuda_checks import cuda_fixture, gpu_photos_fixture  # noqa: F401 (fixtures)
from cuda_checks import NO_CUDA, dali_missing, quiet_loader

from hybridload import recipe
from hybridload.lanes._gpu.failures import rerouting

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)]

#: torchvision's message for a device fault in its batched decode
FAULT = "Failed to decode batch: 5"


def test_the_consumer_thread_makes_no_synchronising_cuda_call(gpu_photos, cuda, record_property):
    rec = recipe.Recipe(
        [
            recipe.Decode(),
            recipe.RandomResizedCrop(224),
            recipe.HorizontalFlip(),
            recipe.Normalize(),
            recipe.RandomErasing(p=0.5, value="random"),
        ]
    )
    consumer, seen, real_show = threading.current_thread(), [], warnings.showwarning

    def show(message, category, *args, **kwargs):
        if threading.current_thread() is consumer and "synchroniz" in str(message).lower():
            seen.append(str(message).splitlines()[0][:200])

    with quiet_loader(gpu_photos, rec, 32, cuda, mode="gpu", gpu_engine="torch") as ld:
        it = iter(ld)
        next(it)  # start-up (pipelines, first allocations) is not delivery
        torch.cuda.synchronize(cuda)
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.showwarning = show
                for _n, (images, _labels, _idx) in zip(range(6), it):
                    images.add_(0)  # the consumer touches the batch on its own stream
        finally:
            torch.cuda.set_sync_debug_mode(0)
            warnings.showwarning = real_show
        gpu_batches = ld.stats()["lanes"].get("gpu", {}).get("batches", 0)
    record_property("syncs_on_the_consumer_thread", len(seen))
    assert gpu_batches, "the GPU lane took no batch"
    assert not seen, seen[:3]


@pytest.mark.parametrize("engine", ["torch", "dali"])
def test_a_device_fault_hands_the_rest_of_the_stream_to_the_cpu_lane(engine, gpu_photos, cuda, record_property):
    if engine == "dali" and dali_missing():
        pytest.skip(dali_missing())
    if engine == "dali":
        from hybridload.lanes._gpu.dali import DaliLane as lane_cls
    else:
        from hybridload.lanes._gpu.torch_lane import TorchGpuLane as lane_cls
    rec = recipe.imagenet_train(224)
    with quiet_loader(gpu_photos, rec, 32, cuda, mode="cpu") as ld:
        want = [idx.tolist() for _i, _l, idx in ld]
    calls, real = {"n": 0}, lane_cls._decode

    def faulty(self, task, batch):
        calls["n"] += 1
        if calls["n"] > 2:
            with rerouting(f"batch {task.seq}"):
                raise RuntimeError(FAULT)
        return real(self, task, batch)

    lane_cls._decode = faulty
    try:
        with quiet_loader(gpu_photos, rec, 32, cuda, mode="gpu", gpu_engine=engine, break_after=2) as ld:
            got = [idx.tolist() for _i, _l, idx in ld]
            gpu_batches = ld.stats()["lanes"].get("gpu", {}).get("batches", 0)
    finally:
        lane_cls._decode = real
    record_property("gpu_batches", gpu_batches)
    record_property("decode_calls", calls["n"])
    assert got == want
    assert gpu_batches == 2 and calls["n"] < len(want)


def test_mode_auto_beside_a_training_step_keeps_a_gpu_share(gpu_photos, cuda, record_property):
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, 2, 1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 1000),
    ).to(cuda)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rec = recipe.imagenet_train(224, normalize=True)
    by_batch, seen, n = [], 0, 0
    with quiet_loader(gpu_photos, rec, 32, cuda, mode="auto", gpu_engine="torch", replan_every=8) as ld:
        epoch = 0
        while n < 120:
            ld.set_epoch(epoch)
            for images, labels, _idx in ld:
                loss = torch.nn.functional.cross_entropy(model(images), labels.to(cuda))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                now = ld.stats()["lanes"].get("gpu", {}).get("batches", 0)
                by_batch.append(now - seen)
                seen, n = now, n + 1
                if n >= 120:
                    break
            epoch += 1
    last = by_batch[-60:]
    share = sum(last) / len(last)
    record_property("gpu_share_of_last_60", round(share, 3))
    assert share > 0, "a busy trainer starved the GPU lane in mode auto"
