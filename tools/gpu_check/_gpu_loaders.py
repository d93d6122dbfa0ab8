"""gpu_check's loaders, training step and trainer-side timing.

Warm-up is deeper than the pipeline (:func:`pipeline_depth`: the loader's window, or a torch
DataLoader's ``workers * prefetch_factor``, plus a margin), so an 8- or 16-worker figure is a
rate, not the burst of batches prefetched during start-up. Every loader measurement carries
the lanes that ran it (:func:`_gpu_headline.gpu_figure`).
"""

from __future__ import annotations

import threading
import time
import warnings

import numpy as np
import torch

from hybridload import HybridLoader, LoaderPolicy
from hybridload._policy import usable_cpus

from _gpu_headline import gpu_figure, lanes_used, sync


def has_torchvision() -> bool:
    try:
        import torchvision  # noqa: F401

        return True
    except Exception:
        return False


def pipeline_depth(workers: int, per_worker: int = 2) -> int:
    """Batches a loader holds ahead of the consumer: ``per_worker`` per worker (hybridload's
    default window, torch DataLoader's prefetch_factor) plus the GPU lane's two."""
    return per_worker * workers + 2


def model_and_step(device, quick):
    """A training step on images: torchvision's ResNet-50 (AMP, channels_last) or a small CNN."""
    if has_torchvision() and not quick:
        from torchvision.models import resnet50

        model = resnet50(num_classes=1000)
    else:
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, 2, 1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(16, 1000),
        )
    model = model.to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    amp = device.type == "cuda"  # bf16 autocast: no loss scaling needed

    def step(images, labels):
        x = images.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
        if x.dtype == torch.uint8:  # torch DataLoader batches: scale on the device
            x = x.float().div_(255)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(model(x), labels.to(device, non_blocking=True))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def trainer_rate(batches, step, device, n, warm, time_left=None, during=None) -> float:
    """Trainer images/s over up to ``n`` batches after ``warm``; stops early when ``time_left()``
    falls under 5 s (at least 2 batches). ``during``: started in a thread after the warm-up
    (an NVML reading taken while the measured batches run)."""
    it = iter(batches)
    for _ in range(warm):
        b = next(it)
        step(b[0], b[1])
    sync(device)
    reader = threading.Thread(target=during, daemon=True) if during else None
    if reader:
        reader.start()
    t0, seen = time.perf_counter(), 0
    for k in range(n):
        if k >= 2 and time_left is not None and time_left() < 5:
            break
        b = next(it)
        step(b[0], b[1])
        seen += len(b[1])
    sync(device)
    rate = seen / (time.perf_counter() - t0)
    if reader:
        reader.join(30)
    return rate


def endless(loader):
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        yield from loader
        epoch += 1


def forever(dl):
    while True:
        yield from dl


def loader_for(src, rec, bs, device, mode, share=None, threads=None, local_workers="threads"):
    policy = LoaderPolicy(
        mode=mode,
        gpu_share=share,
        gpu_engine="torch",
        cpu_actors=0,
        threads=threads or usable_cpus(),
        local_workers=local_workers,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return HybridLoader(src, rec, bs, policy=policy, device=device, seed=0, return_indices=True)


def loader_figure(src, rec, bs, device, mode, step, n, time_left=None, share=None, during=None) -> dict:
    """A loader's trainer images/s with the lanes that ran it (a GPU figure only where the GPU lane did)."""
    threads = usable_cpus()
    with loader_for(src, rec, bs, device, mode, share=share, threads=threads) as ld:
        rate = trainer_rate(endless(ld), step, device, n, pipeline_depth(threads), time_left, during)
        return gpu_figure(rate, lanes_used(ld.stats()), mode, share)


def torch_dataloader(src, rec, bs, workers):
    """torch's DataLoader over the same files with Pillow (torchvision transforms where present)."""
    from PIL import Image

    size = rec.out_hw

    class DS(torch.utils.data.Dataset):
        def __len__(self):
            return len(src)

        def __getitem__(self, i):
            ref = src.ref(i)
            im = Image.open(ref.location).convert("RGB").resize((size[1], size[0]), Image.BILINEAR)
            return torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1), int(ref.label)

    return torch.utils.data.DataLoader(
        DS(),
        batch_size=bs,
        shuffle=True,
        num_workers=workers,
        drop_last=True,
        pin_memory=torch.cuda.is_available(),
        persistent_workers=workers > 0,
    )


def local_sweep(src, rec, bs, nb, counts, time_left=None):
    out = {}
    cpu, idle = torch.device("cpu"), (lambda i, labels: None)
    for n in counts:
        warm = pipeline_depth(n)
        with loader_for(src, rec, bs, cpu, "cpu", threads=n) as ld:
            lane_rate = trainer_rate(endless(ld), idle, cpu, nb, warm, time_left)
        with loader_for(src, rec, bs, cpu, "cpu", threads=n, local_workers="processes") as ld:
            proc_rate = trainer_rate(endless(ld), idle, cpu, nb, warm, time_left)
        dl_rate = trainer_rate(forever(torch_dataloader(src, rec, bs, n)), idle, cpu, nb, warm, time_left)
        out[str(n)] = {
            "hybridload_threads": lane_rate,
            "hybridload_processes": proc_rate,
            "torch_dataloader_workers": dl_rate,
            "warm_batches": warm,
        }
    return out
