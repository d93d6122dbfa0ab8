"""One command that checks the GPU path end to end and measures it: JSON + a printed table.

Sections: ``environment``; ``correctness`` (GPU-engine pixels vs the CPU lane per batch,
identical index streams, batches on the device after ``torch.cuda.set_device``, device
memory (``torch.cuda.mem_get_info``: nvJPEG's and DALI's pools too) flat over many batches
and back after ``close()``); ``ordering`` (the torch engine with its stream stalled by
``torch.cuda._sleep`` before each batch's ops: pixels against the CPU lane, and a control
run without the wait before decode; ``_gpu_ordering.py``); ``device`` (``_gpu_device.py``: synchronisations on the consumer's
delivery path under ``torch.cuda.set_sync_debug_mode``, a device fault injected into each GPU
engine, the GPU lane's share in mode "auto" beside a training step); ``speed`` (trainer images/s with a ResNet-50 training
step — AMP, channels_last — per mode: GPU lane, CPU lane on all cores, split at the
planner's share, torch DataLoader with Pillow on all cores, against the same model on
synthetic on-device data); ``nvml`` (readings taken during the training step);
``plan`` (the planner's share vs a swept share); ``local_sweep`` (the in-process lane's
threads, its worker processes and torch DataLoader workers at 1, 2, 4, 8, 16).

``tolerance`` (each GPU engine's mean/max |diff| from the CPU lane on 4:4:4, 4:2:2 and 4:2:0
JPEGs; "fail" above the README's 0.5 grey levels); ``dali_decoders`` (where DALI and CUDA exist:
full decode + slice vs ROI decode with and without fancy upsampling, against the CPU kernels,
with the nvJPEG version and the decoder backend that implies).

Each section is ``{"status": "ok" | "skipped" | "fail" | "error", ...}``; the JSON is written
after every section, so a run cut off by a time-out still returns what ran. ``--budget-s``
skips (reason "budget") the sections that would start past it. With no CUDA device the GPU
sections are skipped (one log line says so) and the exit status is 0; a missing optional
package (Ray, DALI, torchvision, scikit-image, matplotlib) skips the section that needs it,
naming the package. Exit status 1 only when a section failed or raised.
Needs: torch, numpy, Pillow and the hybridload wheel (with simplejpeg, tqdm, fsspec); no
checkout on sys.path (``hybridload.kernels`` exists only in a built wheel), no scikit-image
(photo-like JPEGs are drawn when it is absent). ``_gpu_sections.py``, ``_gpu_ordering.py`` and ``_gpu_device.py`` must sit beside it.

GPU machine (torch 2.11 + torchvision 0.26, tqdm, fsspec; no DALI, no Ray, no network; Python 3.12):
    here, in the repo root:
           echo /.whl/ >> .git/info/exclude; rm -rf .whl
           python -m pip wheel --no-deps --no-build-isolation -w .whl .
           python -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
               --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl simplejpeg==1.9.0 braceexpand==0.1.7
    there (device tool: carry [".whl"], timeout_s 600):
           python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \\
               --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; \\
               PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py --budget-s 480 --out $OUT/gpu_check.json
    (``python3 benchmarks/gpu_check.py`` puts benchmarks/, not the checkout, on sys.path: hybridload
    comes from the wheel.)
CI smoke (this CPU box, well under a minute):
    python benchmarks/gpu_check.py --device cpu --quick --out /tmp/gpu_check.json
tests/test_gpu_check.py also runs it in a venv holding only torch, numpy, Pillow, nvidia-ml-py and
the wheels, as on a bare GPU machine.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.cli.demo_data import make_photo_folder
from hybridload.kernels import decode_image, process_batch
from hybridload.lanes.base import BatchTask
from hybridload.lanes.gpu.torch_lane import TorchGpuLane, torchvision_decoder
from hybridload.planner import read_gpu
from hybridload.policy import usable_cpus

from _gpu_device import auto_share, delivery_syncs, injected_fault
from _gpu_ordering import stalled_ordering
from _gpu_sections import Sections, skipped, subsampled_folders, table, tolerance

log = logging.getLogger("gpu_check")


def has_torchvision() -> bool:
    try:
        import torchvision  # noqa: F401
        return True
    except Exception:
        return False


def cpu_decoder(datas):
    """The torch engine's decode contract served by the CPU kernels (where torchvision is absent)."""
    return [torch.from_numpy(decode_image(d.numpy().tobytes())).permute(2, 0, 1) for d in datas]


def torch_lane(src, rec, bs, device):
    decode = torchvision_decoder(device) if has_torchvision() else cpu_decoder
    return TorchGpuLane(src, rec, seed=0, batch_size=bs, device=device, decode=decode)


def model_and_step(device, quick):
    """A training step on images: torchvision's ResNet-50 (AMP, channels_last) or a small CNN."""
    if has_torchvision() and not quick:
        from torchvision.models import resnet50
        model = resnet50(num_classes=1000)
    else:
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, 2, 1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                    torch.nn.Flatten(), torch.nn.Linear(16, 1000))
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


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def trainer_rate(batches, step, device, n, warm=2) -> float:
    """Trainer images/s over ``n`` batches of an iterator of (images, labels, ...), after ``warm``."""
    it = iter(batches)
    for _ in range(warm):
        b = next(it)
        step(b[0], b[1])
    sync(device)
    t0, seen = time.perf_counter(), 0
    for _ in range(n):
        b = next(it)
        step(b[0], b[1])
        seen += len(b[1])
    sync(device)
    return seen / (time.perf_counter() - t0)


def endless(loader):
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        yield from loader
        epoch += 1


def loader_for(src, rec, bs, device, mode, share=None, threads=None, local_workers="threads"):
    policy = LoaderPolicy(mode=mode, gpu_share=share, gpu_engine="torch", cpu_actors=0,
                          threads=threads or usable_cpus(), local_workers=local_workers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return HybridLoader(src, rec, bs, policy=policy, device=device, seed=0, return_indices=True)


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
    return torch.utils.data.DataLoader(DS(), batch_size=bs, shuffle=True, num_workers=workers, drop_last=True,
                                       pin_memory=torch.cuda.is_available(), persistent_workers=workers > 0)


def forever(dl):
    while True:
        yield from dl


def check_correctness(src, rec, bs, device, nb):
    out = {}
    lane = torch_lane(src, rec, bs, device)
    means, outliers = [], []
    for k in range(nb):
        idx = np.arange(k * bs, (k + 1) * bs) % len(src)
        a = lane.run_batch(BatchTask(k, 0, idx)).images.cpu()
        b = process_batch(src, rec, idx, 0, 0).images
        d = (a.int() - b.int()).abs()
        means.append(d.float().mean().item())
        outliers.append((d > 2).float().mean().item())
    lane.close()
    out["pixels"] = {"engine": lane.describe(), "batches": nb, "mean_abs_diff_max": max(means),
                     "share_off_by_more_than_2_max": max(outliers)}
    streams = []
    for mode in ("cpu", "gpu"):
        with loader_for(src, rec, bs, device, mode, threads=2) as ld:
            streams.append([idx.tolist() for _i, _l, idx in ld])
    out["index_streams_identical"] = streams[0] == streams[1]
    if device.type == "cuda":
        k = torch.cuda.device_count() - 1
        torch.cuda.set_device(k)
        with loader_for(src, rec, bs, "cuda", "gpu", threads=2) as ld:
            img = next(iter(ld))[0]
            out["device_after_set_device"] = {"set": k, "batch_on": str(img.device), "ok": img.device.index == k}
        torch.cuda.set_device(device)
        out["gpu_memory"] = device_memory_over(lambda: loader_for(src, rec, bs, device, "gpu", threads=2), device)
    return out


def used_bytes(device) -> int:
    """Device memory in use by everyone, as the driver sees it (nvJPEG's and DALI's pools
    included, which ``torch.cuda.memory_allocated`` does not see)."""
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    return total - free


def device_memory_over(make_loader, device, batches: int = 500) -> dict:
    """Used device memory after 20 and after ``batches`` batches, and after ``close()``."""
    base = used_bytes(device)
    ld, mem = make_loader(), {}
    for n, b in enumerate(endless(ld)):
        if n + 1 in (20, batches):
            mem[n + 1] = used_bytes(device)
        if n + 1 >= batches:
            break
    del b
    ld.close()
    torch.cuda.empty_cache()
    after = used_bytes(device)
    return {"at_20_mb": (mem[20] - base) / 2**20, f"at_{batches}_mb": (mem[batches] - base) / 2**20,
            "after_close_mb": (after - base) / 2**20, "flat": mem[batches] <= mem[20] + 64 * 2**20,
            "back_to_baseline": after <= base + 64 * 2**20}


def measure_speed(src, rec, bs, device, nb, quick):
    step = model_and_step(device, quick)
    out = {}
    synth = torch.randn(bs, 3, *rec.out_hw, device=device)
    labels = torch.randint(0, 1000, (bs,), device=device)
    out["ceiling_synthetic"] = trainer_rate(forever([(synth, labels)]), step, device, nb)
    for mode in ("gpu", "cpu"):
        with loader_for(src, rec, bs, device, mode) as ld:
            out[f"hybridload_{mode}"] = trainer_rate(endless(ld), step, device, nb)
    return out, step


def plan_and_split(src, rec, bs, device, step, nb, seconds):
    from hybridload.cli.profile import run_profile
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof = run_profile(src, rec, batch_size=bs, seconds=seconds, sample=min(256, len(src)),
                           check_points=False, device=device)
    swept = {}
    for share in (0.0, 0.25, 0.5, 0.75, 1.0):
        with loader_for(src, rec, bs, device, "split", share=share) as ld:
            swept[share] = trainer_rate(endless(ld), step, device, nb)
    planned = prof.plan.gpu_share
    with loader_for(src, rec, bs, device, "split", share=planned) as ld:
        at_plan = trainer_rate(endless(ld), step, device, nb)
    best = max(swept, key=swept.get)
    return {"planned_share": planned, "at_planned_share": at_plan, "swept": swept, "best_swept_share": best,
            "gpu_label": prof.measurements.gpu_label, "reason": prof.plan.reason}, at_plan


def nvml_during(fn, device):
    """Run ``fn`` while reading NVML (the loader's GPU) in a thread; returns (fn's value, the reading as a dict)."""
    box = {}
    t = threading.Thread(target=lambda: box.update(r=read_gpu(window_s=2.0, interval_s=0.1, device=device)))
    t.start()
    value = fn()
    t.join(30)
    r = box.get("r")
    reading = {"available": bool(getattr(r, "available", False))}
    if r is not None and r.available:
        reading.update(name=r.name, util_mean=r.util_mean, util_max=r.util_max, mem_free_gb=r.mem_free_bytes / 2**30,
                       engines=r.engine_utils())
    elif r is not None:
        reading["reason"] = r.reason
    return value, reading


def local_sweep(src, rec, bs, nb, counts):
    out = {}
    for n in counts:
        with loader_for(src, rec, bs, torch.device("cpu"), "cpu", threads=n) as ld:
            lane_rate = trainer_rate(endless(ld), lambda i, l: None, torch.device("cpu"), nb, warm=1)
        with loader_for(src, rec, bs, torch.device("cpu"), "cpu", threads=n, local_workers="processes") as ld:
            proc_rate = trainer_rate(endless(ld), lambda i, l: None, torch.device("cpu"), nb, warm=1)
        dl_rate = trainer_rate(forever(torch_dataloader(src, rec, bs, n)), lambda i, l: None,
                               torch.device("cpu"), nb, warm=1)
        out[n] = {"hybridload_threads": lane_rate, "hybridload_processes": proc_rate,
                  "torch_dataloader_workers": dl_rate}
    return out


GPU_SECTIONS = ("correctness", "ordering", "device", "tolerance", "dali_decoders", "speed", "nvml", "plan", "local_sweep")


def gpu_engines(device, quick) -> dict:
    """The GPU engines to hold against the CPU lane: {name: lane factory, or why it cannot run}."""
    engines = {"torch": lambda src, rec, bs: torch_lane(src, rec, bs, device)}
    if device.type != "cuda":
        engines["dali"] = "DALI runs here only in its CPU-only mode; the GPU figure needs a CUDA device"
        return engines
    try:
        import nvidia.dali  # noqa: F401
    except ImportError as exc:
        engines["dali"] = f"needs nvidia-dali, which is not installed ({exc})"
        return engines
    from hybridload.lanes.gpu.dali import DaliLane
    engines["dali"] = lambda src, rec, bs: DaliLane(src, rec, seed=0, batch_size=bs, device=device)
    return engines


def dali_section(folders, bs, device) -> dict:
    if device.type != "cuda":
        return skipped("no CUDA device: DALI's GPU decoders need one")
    try:
        import nvidia.dali  # noqa: F401
    except ImportError as exc:
        return skipped(f"needs nvidia-dali, which is not installed ({exc})")
    from _gpu_sections import dali_decoders
    return dali_decoders(folders, bs, device.index)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="small data and model (the CI smoke test)")
    ap.add_argument("--data", help="an ImageFolder root (default: generated photos)")
    ap.add_argument("--out", default="gpu_check.json")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="skip (reason 'budget') the sections that would start after this many seconds")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="gpu_check: %(message)s")
    run = Sections(args.out, args.budget_s)
    device = torch.device(args.device)
    quick = args.quick
    env = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "torchvision": has_torchvision(),
           "device": str(device), "cpus": usable_cpus(), "quick": quick, "budget_s": args.budget_s}
    if device.type == "cuda" and not torch.cuda.is_available():
        reason = (f"no CUDA device (torch {torch.__version__}, CUDA build {torch.version.cuda}: "
                  "torch.cuda.is_available() is False); --device cpu runs the CPU stand-ins")
        log.warning("%s: every GPU section skipped", reason)
        run.set("environment", {**env, "status": "ok", "device_name": "none"})
        for name in GPU_SECTIONS:
            run.set(name, skipped(reason))
        print(table(run.report))
        return 0
    if device.type == "cuda":
        device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
    n_img, bs, nb, size = (48, 8, 3, 64) if quick else (2048, 256, 20, 224)
    tmp = tempfile.gettempdir()
    data = {}

    def environment():
        root = args.data or make_photo_folder(os.path.join(tmp, f"hybridload-gpu-check-{n_img}"), n_img,
                                              num_classes=10, seed=0)
        data["src"], data["rec"] = sources.ImageFolder(str(root)), recipe.imagenet_train(size, normalize=True)
        return {**env, "device": str(device), "batch_size": bs, "images": len(data["src"]), "data": str(root),
                "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}

    if run.run("environment", environment, budgeted=False)["status"] != "ok":
        for name in GPU_SECTIONS:
            run.set(name, skipped("no data: the environment section did not finish"))
        print(table(run.report))
        return 1
    src, rec = data["src"], data["rec"]
    warnings.filterwarnings("once", category=RuntimeWarning)  # a fallback is said once, and shows in the table
    run.run("correctness", lambda: check_correctness(src, recipe.imagenet_train(size), bs, device, nb))  # uint8
    tol_bs = 4 if quick else 32
    run.run("ordering", lambda: stalled_ordering(lambda: torch_lane(src, recipe.imagenet_train(size), tol_bs, device),
                                                 src, recipe.imagenet_train(size), tol_bs)
            if device.type == "cuda" else skipped("needs a CUDA device (torch.cuda._sleep stalls a CUDA stream)"))

    def folders():
        if "folders" not in data:
            data["folders"] = subsampled_folders(src, Path(tempfile.mkdtemp(prefix="gpu-check-sub-")), 2 * tol_bs)
        return data["folders"]
    run.run("tolerance", lambda: tolerance(folders(), recipe.imagenet_train(size), tol_bs, gpu_engines(device, quick)))
    run.run("dali_decoders", lambda: dali_section(folders(), tol_bs, device))
    state = {}

    def speed():
        (sp, state["step"]), state["nvml"] = nvml_during(lambda: measure_speed(src, rec, bs, device, nb, quick),
                                                         device)
        sp["torch_dataloader"] = trainer_rate(forever(torch_dataloader(src, rec, bs, min(16, usable_cpus()))),
                                              state["step"], device, nb)
        sp["ratios"] = {k: v / sp["ceiling_synthetic"] for k, v in sp.items() if k != "ceiling_synthetic"}
        sp["gpu_lane_cost_to_step"] = 1 - sp["hybridload_gpu"] / sp["ceiling_synthetic"]
        return sp
    sp = run.run("speed", speed)
    run.run("nvml", lambda: state["nvml"] if "nvml" in state else skipped("read during the speed section, which "
                                                                          "did not run"))

    def plan():
        step = state.get("step") or model_and_step(device, quick)
        out, at_plan = plan_and_split(src, rec, bs, device, step, nb, 0.5 if quick else 3.0)
        if sp.get("status") == "ok":
            sp["hybridload_split_at_plan"] = at_plan
            sp["ratios"]["hybridload_split_at_plan"] = at_plan / sp["ceiling_synthetic"]
        return out
    run.run("plan", plan)

    def device_section():
        from hybridload.lanes.gpu.torch_lane import TorchGpuLane as lane_cls
        out = {"syncs": delivery_syncs(src, size, bs, device, 5 if quick else 20),
               "faults": {"torch": injected_fault(src, size, bs, device, "torch", lane_cls)}}
        try:
            from hybridload.lanes.gpu.dali import DaliLane
            out["faults"]["dali"] = injected_fault(src, size, bs, device, "dali", DaliLane)
        except Exception as exc:  # no DALI on the machine: said, not failed
            out["faults"]["dali"] = skipped(f"DALI unavailable ({type(exc).__name__}: {exc})")
        out["auto_share"] = auto_share(src, size, bs, device, state.get("step") or model_and_step(device, quick),
                                       30 if quick else 300)
        bad = [k for k, v in [("syncs", out["syncs"]), ("auto_share", out["auto_share"]),
                              *out["faults"].items()] if v.get("status") != "skipped" and not v.get("ok")]
        return {**out, "status": "fail" if bad else "ok", "failed": bad}
    run.run("device", device_section if device.type == "cuda"
            else lambda: skipped("needs a CUDA device (sync debug mode, device faults, auto mode's share)"))
    run.run("local_sweep", lambda: {str(k): v for k, v in local_sweep(src, rec, bs, 2 if quick else nb,
                                                                     (1, 2) if quick else (1, 2, 4, 8, 16)).items()})
    print(table(run.report))
    if run.failed():
        log.error("failed sections: %s", ", ".join(run.failed()))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
