"""gpu_check's ``device`` section: what only a GPU can show about the GPU lane's behaviour.

* ``syncs``: the delivery path (the consumer's loop, on the thread that runs this: the copy to the
  device, Normalize, RandomErasing with random noise) run under
  ``torch.cuda.set_sync_debug_mode("warn")``; every synchronising CUDA call on the consumer's
  thread is counted. Goal: zero (the lanes' own threads may wait for their streams).
* ``faults``: a device fault (torchvision's ``Failed to decode batch: 5``, nvJPEG's
  ALLOCATOR_FAILURE) injected into each GPU engine after two batches: the lane must break and
  the CPU lane finish the stream, every batch once, in order.
* ``auto_share``: mode "auto" beside a training step for a few hundred batches: the GPU lane's
  share of the last hundred must stay above zero (a busy trainer must not starve it).

A part where the GPU lane took no batch (its engine missing, the loader fell back) says so
(``no_gpu_decode``) and is skipped, never passed or failed.
"""

from __future__ import annotations

import threading
import warnings

import torch

from hybridload import HybridLoader, LoaderPolicy, recipe
from hybridload.lanes.gpu.failures import rerouting

from _gpu_sections import no_gpu_decode

FAULT = "Failed to decode batch: 5"


def _loader(src, rec, bs, device, **policy):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return HybridLoader(
            src,
            rec,
            bs,
            device=device,
            seed=0,
            return_indices=True,
            policy=LoaderPolicy(cpu_actors=0, threads=2, **policy),
        )


def delivery_syncs(src, size: int, bs: int, device, batches: int = 20) -> dict:
    rec = recipe.Recipe(
        [
            recipe.Decode(),
            recipe.RandomResizedCrop(size),
            recipe.HorizontalFlip(),
            recipe.Normalize(),
            recipe.RandomErasing(p=0.5, value="random"),
        ]
    )
    consumer, seen, real_show = threading.current_thread(), [], warnings.showwarning  # gpu_check's section thread

    def show(message, category, *args, **kwargs):
        if threading.current_thread() is consumer and "synchroniz" in str(message).lower():
            seen.append(str(message).splitlines()[0][:200])

    with _loader(src, rec, bs, device, mode="gpu", gpu_engine="torch") as ld:
        it = iter(ld)
        next(it)  # start-up (pipelines, first allocations) is not delivery
        torch.cuda.synchronize(device)
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.showwarning = show
                for _n, (images, _labels, _idx) in zip(range(batches), it):
                    images.add_(0)  # the consumer touches the batch on its own stream
        finally:
            torch.cuda.set_sync_debug_mode(0)
            warnings.showwarning = real_show
        gpu_batches = ld.stats()["lanes"].get("gpu", {}).get("batches", 0)
    if not gpu_batches:
        return no_gpu_decode("the GPU lane took no batch", batches=batches)
    return {
        "gpu_batches": gpu_batches,
        "batches": batches,
        "syncs_on_the_consumer_thread": len(seen),
        "first": seen[:3],
        "ok": not seen,
    }


def injected_fault(src, size: int, bs: int, device, engine: str, lane_cls) -> dict:
    rec = recipe.imagenet_train(size)
    with _loader(src, rec, bs, device, mode="cpu") as ld:
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
        with _loader(src, rec, bs, device, mode="gpu", gpu_engine=engine, break_after=2) as ld:
            got = [idx.tolist() for _i, _l, idx in ld]
            stats = ld.stats()
    finally:
        lane_cls._decode = real
    gpu_batches = stats["lanes"].get("gpu", {}).get("batches", 0)
    if not gpu_batches and not calls["n"]:
        return no_gpu_decode(f"the {engine} GPU lane took no batch", engine=engine)
    return {
        "engine": engine,
        "stream_complete": got == want,
        "gpu_batches": gpu_batches,
        "decode_calls": calls["n"],
        "ok": got == want and gpu_batches == 2 and calls["n"] < len(want),
    }


def auto_share(src, size: int, bs: int, device, step, batches: int = 300, time_left=None) -> dict:
    rec = recipe.imagenet_train(size, normalize=True)
    by_lane = []
    with _loader(src, rec, bs, device, mode="auto", gpu_engine="torch", replan_every=8) as ld:
        n, seen = 0, {}
        while n < batches:
            for images, labels, _idx in ld:
                step(images, labels)
                lanes = ld.stats()["lanes"]
                now = {k: v["batches"] for k, v in lanes.items()}
                by_lane.append(now.get("gpu", 0) - seen.get("gpu", 0))
                seen, n = now, n + 1
                if n >= batches or (n >= 40 and time_left is not None and time_left() < 15):
                    batches = n  # the section's time runs short: judge what ran
                    break
        replans = ld.stats()["plan"].get("replans", [])
    last = by_lane[-100:]
    share = sum(last) / max(1, len(last))
    return {"batches": n, "gpu_share_of_last_100": share, "replans": replans[-5:], "ok": share > 0}
