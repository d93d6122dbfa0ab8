"""One command that checks the GPU path end to end and measures it: JSON + a printed table.

Sections, in order (each ends with its rows printed and the JSON written):
``environment`` (versions, torchvision's image extension, decoder backend, driver, CPU model,
/dev/shm); ``correctness`` (GPU lane pixels vs the CPU lane, identical index streams, batches
on the device after ``torch.cuda.set_device``, device memory flat over 150 batches and back
after ``close()``); ``ordering`` (``_gpu_ordering.py``: a stalled run of the lane as the loader
builds it equals an unstalled run, and the control without the wait); ``tolerance``
(``_gpu_pixels.py``: mean, p99, max |diff| per engine on 4:4:4, 4:2:2, 4:2:0 and greyscale,
measured then judged); ``dali_decoders``; ``headline`` (``_gpu_headline.py``: the raw nvJPEG
ceiling on 256 JPEGs, decode + resize, the GPU lane alone at the same batch, their ratio);
``speed`` (trainer images/s with a ResNet-50 step — AMP, channels_last — per mode, each with
the lanes that ran it, and NVML read while the GPU lane runs); ``plan`` (the planner's share,
profiled beside a running training step, vs a trimmed sweep); ``device`` (``_gpu_device.py``:
syncs on the consumer thread, injected device faults, mode auto's share); ``local_sweep``
(CPU lanes vs torch DataLoader workers; optional, last: ``--sweep``).

Exit status: 1 only when a section failed or raised. An engine that is not installed, or a
section where no GPU decode ran, is ``skipped`` with its reason. Without a CUDA device every
GPU section is skipped and the status is 0; ``--device cpu`` runs the CPU stand-ins (the
torch engine on CPU tensors) as a smoke test. Each section runs under a watchdog
(``--section-s``) and reads the budget (``--budget-s``, default 330 s on CUDA) inside, so the
whole run fits one 10-minute command with room to rerun.

Needs: torch, numpy, Pillow, nvidia-ml-py and the hybridload wheel (with simplejpeg,
braceexpand, tqdm, fsspec); torchvision or torchcodec for the torch engine on CUDA; no checkout
on sys.path. The ``_gpu_*.py`` helpers must sit beside it.

GPU machine (torch 2.11 + torchvision 0.26, tqdm, fsspec; no DALI, no Ray, no network; Python 3.12).
    here, in the repo root (the project's venv: its setuptools builds the PEP 639 licence):
        echo /.whl/ >> .git/info/exclude; rm -rf .whl
        .venv/bin/python -m pip wheel --no-deps --no-build-isolation -w .whl .
        .venv/bin/python -m pip download --no-deps --only-binary=:all: --python-version 3.12 \\
            --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \\
            -d .whl simplejpeg==1.9.0 braceexpand==0.1.7
    there (device tool: carry [".whl"], timeout_s 600):
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \\
            --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; \\
            PYTHONUNBUFFERED=1 python3 tools/gpu_check/gpu_check.py --out $OUT/gpu_check.json
    (``python3 tools/gpu_check/gpu_check.py`` puts tools/gpu_check/, not the checkout, on sys.path.)

Bare CPU venv (this box; what tests/test_gpu_check.py also does with links):
    python3 -m venv /tmp/bare && /tmp/bare/bin/pip install -q torch==2.13.0 numpy pillow nvidia-ml-py \\
        .whl/*.whl   # the wheels built as above (tqdm, fsspec from the index)
    mkdir /tmp/run && cp tools/gpu_check/gpu_check.py tools/gpu_check/_gpu_*.py /tmp/run && cd /tmp/run
    /tmp/bare/bin/python gpu_check.py                                  # exit 0, GPU sections skipped
    /tmp/bare/bin/python gpu_check.py --device cpu --quick --sweep     # exit 0, stand-ins ok
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
import threading
import warnings
from pathlib import Path

import numpy as np
import torch

from hybridload import LoaderPolicy, recipe, sources
from hybridload.cli.demo_data import make_photo_folder
from hybridload.kernels import decode_image, process_batch
from hybridload.lanes.base import BatchTask
from hybridload.lanes.gpu import LOADER_LANE_FLAGS, build_engine
from hybridload.lanes.gpu.feed import read_batch
from hybridload.lanes.gpu.torch_lane import TorchGpuLane
from hybridload.planner import read_gpu
from hybridload.policy import usable_cpus

from _gpu_device import auto_share, delivery_syncs, injected_fault
from _gpu_headline import environment_record, host_images, lane_alone, raw_ceiling
from _gpu_loaders import (
    forever,
    loader_figure,
    loader_for,
    local_sweep,
    model_and_step,
    pipeline_depth,
    torch_dataloader,
    trainer_rate,
    endless,
)
from _gpu_ordering import cuda_stall, stalled_ordering
from _gpu_pixels import subsampled_folders, tolerance
from _gpu_sections import Sections, no_gpu_decode, skipped, table

log = logging.getLogger("gpu_check")

GPU_SECTIONS = (
    "correctness",
    "ordering",
    "tolerance",
    "dali_decoders",
    "headline",
    "speed",
    "nvml",
    "plan",
    "device",
    "local_sweep",
)


def cpu_decoder(datas):
    """The torch engine's decode contract served by the CPU kernels (the CPU stand-in)."""
    return [torch.from_numpy(decode_image(d.numpy().tobytes())).permute(2, 0, 1) for d in datas]


def torch_unavailable(device) -> str | None:
    """Why the torch engine cannot run on ``device`` (None: it can; a CPU device runs the stand-in)."""
    if device.type != "cuda":
        return None
    from hybridload.lanes.gpu.torch_decoders import gpu_decoder

    try:
        gpu_decoder(device)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def loader_lane(src, rec, bs, device):
    """The torch GPU lane exactly as the loader builds it (uint8 out, no host wait per batch); on a
    CPU device the same lane and flags with the CPU decoder."""
    if device.type == "cuda":
        spec = LoaderPolicy(gpu_engine="torch", cpu_actors=0).lane_spec(device=device, recipe=rec)
        return build_engine("torch", spec, src, rec, batch_size=bs, device=device)
    return TorchGpuLane(src, rec, batch_size=bs, device=device, decode=cpu_decoder, **LOADER_LANE_FLAGS)


def dali_unavailable(device) -> str | None:
    if device.type != "cuda":
        return "DALI runs here only in its CPU-only mode; the GPU figure needs a CUDA device"
    try:
        import nvidia.dali  # noqa: F401
    except Exception as exc:
        return f"needs nvidia-dali, which is not installed ({type(exc).__name__}: {exc})"
    return None


def used_bytes(device) -> int:
    """Device memory in use by everyone, as the driver sees it (nvJPEG's pools included)."""
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    return total - free


def device_memory_over(make_loader, device, batches: int = 150, time_left=None) -> dict:
    """Used device memory after 20 and after ``batches`` batches (fewer, at least 40, when the
    section's time runs short), and after ``close()``."""
    base = used_bytes(device)
    ld, mem, n = make_loader(), {}, 0
    for n, b in enumerate(endless(ld), start=1):
        if n == 20:
            mem[20] = used_bytes(device)
        short = n >= 40 and time_left is not None and time_left() < 15
        if n >= batches or short:
            mem["end"] = used_bytes(device)
            break
    del b
    ld.close()
    torch.cuda.empty_cache()
    after = used_bytes(device)
    return {
        "batches": n,
        "at_20_mb": (mem[20] - base) / 2**20,
        "at_end_mb": (mem["end"] - base) / 2**20,
        "after_close_mb": (after - base) / 2**20,
        "flat": mem["end"] <= mem[20] + 64 * 2**20,
        "back_to_baseline": after <= base + 64 * 2**20,
    }


def check_correctness(src, rec, bs, device, nb, time_left=None):
    out = {}
    lane = loader_lane(src, rec, bs, device)
    means = []
    try:
        for k in range(nb):
            idx = np.arange(k * bs, (k + 1) * bs) % len(src)
            a = host_images(lane.run_batch(BatchTask(k, 0, idx)))
            b = process_batch(src, rec, idx, 0, 0).images
            means.append((a.int() - b.int()).abs().float().mean().item())
    finally:
        lane.close()
    out["pixels"] = {"engine": lane.describe(), "batches": nb, "mean_abs_diff_max": max(means)}
    streams, ran = [], {}
    for mode in ("cpu", "gpu"):
        with loader_for(src, rec, bs, device, mode, threads=2) as ld:
            streams.append([idx.tolist() for _i, _l, idx in ld])
            ran[mode] = {k: v["batches"] for k, v in ld.stats()["lanes"].items()}
    out["index_streams_identical"], out["lanes"] = streams[0] == streams[1], ran
    if device.type == "cuda":
        k = torch.cuda.device_count() - 1
        torch.cuda.set_device(k)
        with loader_for(src, rec, bs, "cuda", "gpu", threads=2) as ld:
            img = next(iter(ld))[0]
            out["device_after_set_device"] = {"set": k, "batch_on": str(img.device), "ok": img.device.index == k}
        torch.cuda.set_device(device)
        out["gpu_memory"] = device_memory_over(
            lambda: loader_for(src, rec, bs, device, "gpu", threads=2), device, time_left=time_left
        )
    bad = [
        k
        for k, v in [
            ("index streams", out["index_streams_identical"]),
            ("set_device", out.get("device_after_set_device", {}).get("ok", True)),
            ("memory flat", out.get("gpu_memory", {}).get("flat", True)),
        ]
        if not v
    ]
    if device.type == "cuda" and not ran["gpu"].get("gpu"):
        return no_gpu_decode(f"the loader in mode gpu ran no batch on the GPU lane (lanes: {ran['gpu']})", **out)
    return {**out, **({"status": "fail", "reason": ", ".join(bad)} if bad else {})}


def nvml_reader(device, box: dict, window_s: float = 2.0):
    def read():
        r = read_gpu(window_s=window_s, interval_s=0.1, device=device)
        reading = {"available": bool(getattr(r, "available", False))}
        if r.available:
            reading.update(
                name=r.name,
                util_mean=r.util_mean,
                util_max=r.util_max,
                mem_free_gb=r.mem_free_bytes / 2**30,
                engines=r.engine_utils(),
            )
        else:
            reading["reason"] = r.reason
        box.update(reading)

    return read


@contextlib.contextmanager
def training_beside(step, bs, hw, device):
    """The training step running on synthetic data in a thread (the GPU as busy as in training)."""
    x = torch.randn(bs, 3, *hw, device=device)
    y = torch.randint(0, 1000, (bs,), device=device)
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            step(x, y)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(60)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="small data and model (the CI smoke test)")
    ap.add_argument("--data", help="an ImageFolder root (default: generated photos)")
    ap.add_argument("--out", default="gpu_check.json")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="the whole run's seconds (default 330 on CUDA): later sections are skipped "
        "(reason 'budget'), running ones cut their measurements short",
    )
    ap.add_argument("--section-s", type=float, default=120.0, help="the watchdog's limit per section")
    ap.add_argument("--sweep", action="store_true", help="also run the CPU-only local sweep, last")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="gpu_check: %(message)s")
    device = torch.device(args.device)
    budget = args.budget_s if args.budget_s is not None else (330.0 if device.type == "cuda" else None)
    run = Sections(args.out, budget, args.section_s)
    env = {
        **environment_record(device),
        "device": str(device),
        "cpus": usable_cpus(),
        "quick": args.quick,
        "budget_s": budget,
    }
    if device.type == "cuda" and not torch.cuda.is_available():
        reason = (
            f"no CUDA device (torch {torch.__version__}, CUDA build {torch.version.cuda}: "
            "torch.cuda.is_available() is False); --device cpu runs the CPU stand-ins"
        )
        log.warning("%s: every GPU section skipped", reason)
        run.set("environment", {**env, "status": "ok", "device_name": "none"})
        for name in GPU_SECTIONS:
            run.set(name, skipped(reason))
        print(table(run.report))
        return 0
    if device.type == "cuda":
        device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
    quick, left = args.quick, run.time_left
    n_img, bs, nb, size = (48, 8, 3, 64) if quick else (1024, 256, 20, 224)
    tol_bs = 4 if quick else 32
    data = {}

    def environment():
        root = args.data or make_photo_folder(
            os.path.join(tempfile.gettempdir(), f"hybridload-gpu-check-{n_img}"), n_img, num_classes=10, seed=0
        )
        data["src"], data["rec"] = sources.ImageFolder(str(root)), recipe.imagenet_train(size, normalize=True)
        from hybridload.lanes.gpu.torch_decoders import backend_name

        return {
            **env,
            "device": str(device),
            "batch_size": bs,
            "images": len(data["src"]),
            "data": str(root),
            "decoder_backend": backend_name() if device.type == "cuda" else "CPU kernels (stand-in)",
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        }

    if run.run("environment", environment, budgeted=False)["status"] != "ok":
        for name in GPU_SECTIONS:
            run.set(name, skipped("no data: the environment section did not finish"))
        print(table(run.report))
        return 1
    src, rec, rec8 = data["src"], data["rec"], recipe.imagenet_train(size)
    why_torch = torch_unavailable(device)
    warnings.filterwarnings("once", category=RuntimeWarning)  # a fallback is said once, and shows in the table

    def needs_torch(fn):
        return (lambda: skipped(f"the torch engine cannot run: {why_torch}")) if why_torch else fn

    run.run("correctness", needs_torch(lambda: check_correctness(src, rec8, bs, device, 4 if not quick else nb, left)))
    run.run(
        "ordering",
        needs_torch(
            lambda: stalled_ordering(
                lambda: loader_lane(src, rec8, tol_bs, device),
                len(src),
                tol_bs,
                stall=cuda_stall,
                sync=lambda lane: torch.cuda.synchronize(device),
            )
        )
        if device.type == "cuda"
        else lambda: skipped(
            "needs a CUDA device (torch.cuda._sleep stalls a CUDA stream); "
            "tests/test_gpu_check.py runs its logic on a fake stream"
        ),
    )

    def folders():
        if "folders" not in data:
            data["folders"] = subsampled_folders(src, Path(tempfile.mkdtemp(prefix="gpu-check-sub-")), 2 * tol_bs)
        return data["folders"]

    engines = {
        "torch": why_torch or (lambda s, r, b: loader_lane(s, r, b, device)),
        "dali": dali_unavailable(device)
        or (
            lambda s, r, b: build_engine(
                "dali",
                LoaderPolicy(gpu_engine="dali", cpu_actors=0).lane_spec(device=device, recipe=r),
                s,
                r,
                batch_size=b,
                device=device,
            )
        ),
    }
    run.run("tolerance", lambda: tolerance(folders(), rec8, tol_bs, engines))

    def dali_section():
        if dali_unavailable(device):
            return skipped(dali_unavailable(device))
        from _gpu_pixels import dali_decoders

        return dali_decoders(folders(), tol_bs, device.index)

    run.run("dali_decoders", dali_section)

    def headline():
        head_bs = min(256, len(src))
        idx = np.arange(head_bs)
        batch = read_batch(src, rec8, BatchTask(0, 0, idx))
        from hybridload.lanes.gpu.torch_decoders import gpu_decoder

        decode = gpu_decoder(device) if device.type == "cuda" else cpu_decoder
        box: dict = {}
        reader = threading.Thread(target=nvml_reader(device, box, 1.0), daemon=True) if device.type == "cuda" else None
        if reader:
            reader.start()
        out = raw_ceiling(batch.payloads, decode, batch.params, device, reps=2 if quick else 5)
        if reader:
            reader.join(30)
            out["nvml_during_raw_decode"] = box  # NVJPG > 0: nvJPEG's hardware backend ran
        lane = loader_lane(src, rec8, head_bs, device)
        try:
            out["lane_alone_img_s"] = lane_alone(lane, len(src), head_bs, 2 if quick else 10, device)
            out["lane_prep"] = f"{lane.gpu_threads} threads (as the loader builds it)"
        finally:
            lane.close()
        out["lane_vs_raw"] = out["lane_alone_img_s"] / out["raw_decode_resize_img_s"]
        procs = min(8, usable_cpus())  # the host preparation in worker processes: cores, not one GIL
        lane = TorchGpuLane(
            src,
            rec8,
            batch_size=head_bs,
            device=device,
            decode=decode,
            gpu_threads=procs,
            prep_kind="processes",
            **LOADER_LANE_FLAGS,
        )
        try:
            out["lane_alone_prep_processes_img_s"] = lane_alone(lane, len(src), head_bs, 2 if quick else 10, device)
            out["prep_processes"] = procs
        finally:
            lane.close()
        out["batch"] = head_bs
        return out

    run.run("headline", needs_torch(headline))
    state = {}

    def speed():
        step = state["step"] = model_and_step(device, quick)
        synth = torch.randn(bs, 3, *rec.out_hw, device=device)
        labels = torch.randint(0, 1000, (bs,), device=device)
        ceiling = trainer_rate(forever([(synth, labels)]), step, device, nb, 3, left)
        runs = {"ceiling_synthetic": {"img_s": ceiling, "lanes": "synthetic"}}
        box = state["nvml"] = {}
        during = nvml_reader(device, box) if device.type == "cuda" else None
        runs["hybridload_gpu"] = loader_figure(src, rec, bs, device, "gpu", step, nb, left, during=during)
        runs["hybridload_cpu"] = loader_figure(src, rec, bs, device, "cpu", step, nb, left)
        workers = min(16, usable_cpus())
        runs["torch_dataloader"] = {
            "img_s": trainer_rate(
                forever(torch_dataloader(src, rec, bs, workers)), step, device, nb, pipeline_depth(workers), left
            ),
            "lanes": f"{workers} DataLoader workers",
        }
        for r in runs.values():
            r["vs_ceiling"] = r["img_s"] / ceiling if r.get("img_s") else None
        if runs["hybridload_gpu"]["img_s"] is None:
            return no_gpu_decode(runs["hybridload_gpu"]["note"], runs=runs)
        return {"runs": runs, "gpu_lane_cost_to_step": 1 - runs["hybridload_gpu"]["img_s"] / ceiling}

    sp = run.run("speed", needs_torch(speed))
    run.run(
        "nvml",
        lambda: (
            {**state["nvml"], "read": "while the GPU lane fed the training step"}
            if state.get("nvml")
            else skipped("read during the speed section, which did not run")
        ),
    )

    def plan():
        from hybridload.cli.profile import run_profile

        step = state.get("step") or model_and_step(device, quick)
        with training_beside(step, bs, rec.out_hw, device), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prof = run_profile(
                src,
                rec,
                batch_size=bs,
                seconds=0.5 if quick else 3.0,
                sample=min(256, len(src)),
                check_points=False,
                device=device,
            )
        shares = sorted({0.0, 0.5, 1.0, round(prof.plan.gpu_share, 2)})
        swept = {s: loader_figure(src, rec, bs, device, "split", step, nb, left, share=s) for s in shares}
        rates = {s: r["img_s"] or 0.0 for s, r in swept.items()}
        if not any(r["lanes"].get("gpu") for r in swept.values()):
            return no_gpu_decode(
                "no swept share ran a batch on the GPU lane", planned_share=prof.plan.gpu_share, swept=swept
            )
        best_single = max(rates.get(0.0, 0.0), rates.get(1.0, 0.0))
        out = {
            "planned_share": prof.plan.gpu_share,
            "planned_beside_training_step": True,
            "swept": swept,
            "best_swept_share": max(rates, key=rates.get),
            "reason": prof.plan.reason,
            "split_vs_best_single_lane": rates[round(prof.plan.gpu_share, 2)] / best_single if best_single else None,
        }
        if sp.get("status") == "ok":
            out["at_plan_vs_ceiling"] = rates[round(prof.plan.gpu_share, 2)] / sp["runs"]["ceiling_synthetic"]["img_s"]
        return out

    run.run("plan", needs_torch(plan))

    def device_section():
        from hybridload.lanes.gpu.torch_lane import TorchGpuLane as lane_cls
        from _gpu_sections import verdict

        parts = {
            "syncs": delivery_syncs(src, size, bs, device, 5 if quick else 20),
            "auto_share": auto_share(
                src,
                size,
                bs,
                device,
                state.get("step") or model_and_step(device, quick),
                30 if quick else 150,
                time_left=left,
            ),
        }
        faults = {"torch": injected_fault(src, size, bs, device, "torch", lane_cls)}
        if dali_unavailable(device):
            faults["dali"] = skipped(dali_unavailable(device))
        else:
            from hybridload.lanes.gpu.dali import DaliLane

            faults["dali"] = injected_fault(src, size, bs, device, "dali", DaliLane)
        parts = {k: verdict(v) for k, v in parts.items()}
        faults = {k: verdict(v) for k, v in faults.items()}
        judged = [(k, v) for k, v in [*parts.items(), *faults.items()] if v["status"] != "skipped"]
        if not judged:
            return no_gpu_decode("no part ran a GPU decode", **parts, faults=faults)
        bad = [k for k, v in judged if not v.get("ok")]
        return {**parts, "faults": faults, "status": "fail" if bad else "ok", "failed": bad}

    run.run(
        "device",
        needs_torch(device_section)
        if device.type == "cuda"
        else lambda: skipped("needs a CUDA device (sync debug mode, device faults, auto mode's share)"),
    )
    run.run(
        "local_sweep",
        (lambda: local_sweep(src, rec, bs, 6 if quick else nb, (1, 2) if quick else (8, 16), left))
        if args.sweep
        else lambda: skipped("optional: --sweep runs it"),
    )
    print(table(run.report), flush=True)
    code = 1 if run.failed() else 0
    if run.failed():
        log.error("failed sections: %s", ", ".join(run.failed()))
    if run.hung:  # a section's thread is still running: do not wait for it at exit
        logging.shutdown()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
