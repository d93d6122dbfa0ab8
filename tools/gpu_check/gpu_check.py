"""The one command of a GPU machine: the GPU tests and the GPU figures, and the table for
benchmarks/RESULTS.md.

Sections, in order, each with its own time limit; the JSON (``--out``) is rewritten after each
one and the table (the same name, ``.md``) at the end, whatever failed:

``environment``: the machine (GPU, driver, CUDA, torch, torchvision, CPU, /dev/shm), where
hybridload was imported from, and that DALI is not there (it cannot be carried: the DALI engine
is verified in its CPU-only mode only; that is said, never failed). ``tests``: ``pytest -m gpu``
over a copy of ``tests/gpu/`` (``--tests``) in a folder of its own, so hybridload comes from the
installed wheel; each test's outcome and figures are appended to ``<out>.tests.jsonl`` as it
ends, pytest's output to ``<out>.tests.log``; a test past ``--test-s`` ends the run with every
thread's stack. ``headline``: the raw nvJPEG ceiling on 256 JPEGs (decode, then decode +
resize) against the GPU lane alone at batch 256, built through the lane spec. ``speed``: trainer
images/s with a ResNet-50 step (AMP, channels_last) fed by the loader per mode, against the same
step on synthetic data; NVML read while the GPU lane runs (``nvml``). ``plan``: the planner's
share, profiled beside a running training step, against a sweep; the split against the sum of
its lanes alone. ``local_sweep`` (``--sweep``): the CPU lanes against torch DataLoader workers.

Exit status: 1 only when a section failed or raised (a failed GPU test included). Without a
CUDA device the GPU tests skip, each with its reason, the figures are skipped with theirs, and
the status is 0; ``--device cpu --quick`` runs the figures' code as a CPU smoke test (the torch
engine on CPU tensors with the CPU kernels' decoder, built through the same lane spec).

Needs: torch, numpy, Pillow, nvidia-ml-py, pytest and the hybridload wheel (with simplejpeg,
braceexpand, tqdm, fsspec); torchvision or torchcodec for the torch engine on CUDA.

The GPU machine (torch 2.11 + torchvision 0.26; no DALI, no Ray, no network; Python 3.12):
    here, in the repo root (the project's venv: its setuptools builds the PEP 639 licence):
        echo /.whl/ >> .git/info/exclude; rm -rf .whl
        .venv/bin/python -m pip wheel --no-deps --no-build-isolation -w .whl .
        .venv/bin/python -m pip download --no-deps --only-binary=:all: --python-version 3.12 \\
            --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \\
            -d .whl simplejpeg==1.9.0 braceexpand==0.1.7 pytest==9.2.0 pluggy==1.7.0 \\
            iniconfig==2.3.1 packaging==26.3 pygments==2.21.0
        du -ch .whl $(git ls-files) | tail -1     # what travels: under 64 MiB
    there (device tool: carry [".whl"], timeout_s 450; typically 4 minutes, at most about 7):
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \\
            --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; \\
            PYTHONUNBUFFERED=1 python3 tools/gpu_check/gpu_check.py --out $OUT/gpu_check.json
    (``python3 tools/gpu_check/gpu_check.py`` puts tools/gpu_check/, not the checkout, on sys.path.)
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path

import numpy as np
import torch

from hybridload import recipe, sources
from hybridload.cli.demo_data import make_photo_folder
from hybridload._kernels import decode_image
from hybridload.lanes._base import BatchTask
from hybridload.lanes._gpu.feed import read_batch
from hybridload.planner import read_gpu
from hybridload._policy import usable_cpus

from _gpu_headline import environment_record, lane_alone, raw_ceiling
from _gpu_loaders import (
    forever,
    loader_figure,
    local_sweep,
    model_and_step,
    pipeline_depth,
    torch_dataloader,
    trainer_rate,
)
from _gpu_sections import Sections, goals_table, no_gpu_decode, skipped, table, tests_record

log = logging.getLogger("gpu_check")

#: the GPU tests, beside this folder in a checkout (the GPU machine gets the whole tree)
TESTS = Path(__file__).resolve().parents[2] / "tests" / "gpu"
GPU_SECTIONS = ("tests", "headline", "speed", "nvml", "plan", "local_sweep")


def cpu_decoder(datas):
    """The torch engine's decode contract served by the CPU kernels (the CPU stand-in)."""
    return [torch.from_numpy(decode_image(d.numpy().tobytes())).permute(2, 0, 1) for d in datas]


@contextlib.contextmanager
def cpu_stand_in(device):
    """On a CPU device, the torch engine's decoder is the CPU kernels' (``--device cpu``): the
    lane spec then builds the same lane, on CPU tensors."""
    if device.type == "cuda":
        yield
        return
    from hybridload.lanes._gpu import torch_decoders

    real = torch_decoders.gpu_decoder
    torch_decoders.gpu_decoder = lambda device: cpu_decoder
    try:
        yield
    finally:
        torch_decoders.gpu_decoder = real


def torch_unavailable(device) -> str | None:
    """Why the torch engine cannot run on ``device`` (None: it can)."""
    from hybridload.lanes._gpu.torch_decoders import gpu_decoder

    try:
        gpu_decoder(device)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def dali_record() -> str:
    try:
        import nvidia.dali

        return f"installed ({nvidia.dali.__version__})"
    except Exception:
        return (
            "not installed: it cannot be carried here (788 MB against 64 MiB); the DALI engine is "
            "verified in its CPU-only mode only"
        )


def run_gpu_tests(tests_dir: Path, out: Path, limit_s: float, test_s: float) -> dict:
    """``pytest -m gpu`` over a copy of ``tests_dir`` in a fresh folder (hybridload from the
    installed wheel, not a checkout); each test's outcome as it ends in ``<out>.tests.jsonl``."""
    try:
        import pytest
    except ImportError as exc:
        return skipped(f"needs pytest, which is not installed ({exc})")
    if not tests_dir.is_dir():
        return skipped(f"no GPU tests at {tests_dir} (--tests names the folder)")
    run = Path(tempfile.mkdtemp(prefix="gpu-tests-"))
    for f in tests_dir.glob("*.py"):
        shutil.copy(f, run / f.name)
    (run / "pytest.ini").write_text("[pytest]\n")  # this folder is the root: no checkout's conftest
    results, logfile = out.with_suffix(".tests.jsonl"), out.with_suffix(".tests.log")
    results.unlink(missing_ok=True)
    env = {
        **os.environ,
        "GPU_CHECK_RESULTS": str(results),
        "GPU_CHECK_TEST_S": str(test_s),
        "PYTHONUNBUFFERED": "1",
        # the machine's own pytest plugins were built for its own pytest, not the carried one
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "-v",
        "-rs",
        "-p",
        "no:cacheprovider",
        "-p",
        "cuda_report",
        "-c",
        "pytest.ini",
        ".",
    ]
    timed_out = False
    with open(logfile, "w") as f:
        proc = subprocess.Popen(cmd, cwd=run, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, 9)
            code = proc.wait(30)
    tail = logfile.read_text(errors="replace")[-3000:]
    return tests_record(results, code, tail, pytest.__version__, timed_out=timed_out, limit_s=limit_s)


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
    ap.add_argument("--out", default="gpu_check.json", help="the JSON; the table goes beside it (.md)")
    ap.add_argument("--tests", default=str(TESTS), help="the GPU tests' folder (default: the checkout's tests/gpu)")
    ap.add_argument("--tests-s", type=float, default=120.0, help="the GPU tests' time limit, all together")
    ap.add_argument("--test-s", type=float, default=60.0, help="one GPU test's time limit")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="the figures' seconds after the tests (default 120 on CUDA): later sections are skipped "
        "(reason 'budget'), running ones cut their measurements short",
    )
    ap.add_argument("--section-s", type=float, default=60.0, help="the watchdog's limit per figure section")
    ap.add_argument("--sweep", action="store_true", help="also run the CPU-only local sweep, last")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="gpu_check: %(message)s")
    out = Path(args.out).resolve()  # pytest runs in a folder of its own
    out.parent.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    run = Sections(str(out), None, args.section_s)
    import hybridload

    env = {
        **environment_record(device),
        "hybridload": f"{getattr(hybridload, '__version__', '?')} from {Path(hybridload.__file__).parent}",
        "dali": dali_record(),
        "device": str(device),
        "cpus": usable_cpus(),
        "quick": args.quick,
    }
    no_cuda = device.type == "cuda" and not torch.cuda.is_available()
    if no_cuda:
        reason = (
            f"no CUDA device (torch {torch.__version__}, CUDA build {torch.version.cuda}: "
            "torch.cuda.is_available() is False); --device cpu runs the figures' CPU smoke test"
        )
        log.warning("%s: the GPU tests skip and the figures are skipped", reason)
        env["device_name"] = "none"
    elif device.type == "cuda":
        device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
        try:
            env["device_name"] = torch.cuda.get_device_name(device)
        except Exception as exc:  # the table still comes: the tests and figures say what fails
            env["device_name"] = f"unknown ({type(exc).__name__}: {exc})"[:200]
    else:
        env["device_name"] = "cpu (stand-in)"
    run.set("environment", {**env, "status": "ok"})
    run.run(
        "tests",
        lambda: run_gpu_tests(Path(args.tests), out, args.tests_s, args.test_s),
        limit_s=args.tests_s + 30,
    )
    if no_cuda:
        for name in GPU_SECTIONS[1:]:
            run.set(name, skipped(reason))
        return finish(run, out)
    budget = args.budget_s if args.budget_s is not None else (120.0 if device.type == "cuda" else None)
    run.restart_budget(budget)
    with cpu_stand_in(device):
        figures(run, args, device)
    return finish(run, out)


def finish(run: Sections, out: Path) -> int:
    text = goals_table(run.report)
    out.with_suffix(".md").write_text(text + "\n")
    print(table(run.report), flush=True)
    print(text, flush=True)
    code = 1 if run.failed() else 0
    if run.failed():
        log.error("failed sections: %s", ", ".join(run.failed()))
    if run.hung:  # a section's thread is still running: do not wait for it at exit
        logging.shutdown()
        os._exit(code)
    return code


def figures(run: Sections, args, device) -> None:
    """The figure sections: headline, speed, nvml, plan, local_sweep."""
    from _gpu_headline import spec_lane

    quick, left = args.quick, run.time_left
    n_img, bs, nb, size = (48, 8, 3, 64) if quick else (1024, 256, 20, 224)
    rec, rec8 = recipe.imagenet_train(size, normalize=True), recipe.imagenet_train(size)
    state: dict = {}

    def photos():
        """The photo set, made inside the first section that reads it (under its watchdog)."""
        if "src" not in state:
            root = args.data or make_photo_folder(
                os.path.join(tempfile.gettempdir(), f"hybridload-gpu-check-{n_img}"), n_img, num_classes=10, seed=0
            )
            state["src"] = sources.ImageFolder(str(root))
        return state["src"]

    why_torch = torch_unavailable(device)
    warnings.filterwarnings("once", category=RuntimeWarning)  # a fallback is said once, and shows in the table

    def needs_torch(fn):
        return (lambda: skipped(f"the torch engine cannot run: {why_torch}")) if why_torch else fn

    def headline():
        src = photos()
        head_bs = min(256, len(src))
        batch = read_batch(src, rec8, BatchTask(0, 0, np.arange(head_bs)))
        from hybridload.lanes._gpu.torch_decoders import gpu_decoder

        box: dict = {}
        reader = threading.Thread(target=nvml_reader(device, box, 1.0), daemon=True) if device.type == "cuda" else None
        if reader:
            reader.start()
        out = raw_ceiling(batch.payloads, gpu_decoder(device), batch.params, device, reps=2 if quick else 5)
        if reader:
            reader.join(30)
            out["nvml_during_raw_decode"] = box  # NVJPG > 0: nvJPEG's hardware backend ran
        lane = spec_lane(src, rec8, head_bs, device)
        try:
            out["lane_alone_img_s"] = lane_alone(lane, len(src), head_bs, 2 if quick else 10, device)
            out["lane"] = f"{lane.describe()}, {lane.gpu_threads} prep threads (built through the lane spec)"
        finally:
            lane.close()
        out["lane_vs_raw"] = out["lane_alone_img_s"] / out["raw_decode_resize_img_s"]
        out["batch"] = head_bs
        return out

    run.run("headline", needs_torch(headline))

    def speed():
        src = photos()
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
            else skipped("read during the speed section on a CUDA device, which did not run")
        ),
    )

    def plan():
        from hybridload.cli._profile import run_profile

        src = photos()
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
        planned = round(prof.plan.gpu_share, 2)
        shares = sorted({0.0, 0.5, 1.0, planned})
        swept = {s: loader_figure(src, rec, bs, device, "split", step, nb, left, share=s) for s in shares}
        rates = {s: r["img_s"] or 0.0 for s, r in swept.items()}
        if not any(r["lanes"].get("gpu") for r in swept.values()):
            return no_gpu_decode("no swept share ran a batch on the GPU lane", planned_share=prof.plan.gpu_share)
        # the loader alone (a consumer that only takes the batch): the split against the sum of its lanes alone
        idle = lambda images, labels: None  # noqa: E731
        alone = {s: loader_figure(src, rec, bs, device, "split", idle, nb, left, share=s) for s in (0.0, 1.0, planned)}
        # the split's own rate even where its share gave the GPU lane no batch in this short run
        at_plan = alone[planned]["img_s"] or alone[planned].get("measured_img_s") or 0.0
        both = (alone[0.0]["img_s"] or 0.0) + (alone[1.0]["img_s"] or 0.0)
        out = {
            "planned_share": prof.plan.gpu_share,
            "planned_beside_training_step": True,
            "swept": {str(s): r for s, r in swept.items()},
            "best_swept_share": max(rates, key=lambda s: rates[s]),
            "reason": prof.plan.reason,
            "at_plan_vs_best_swept": rates[planned] / max(rates.values()) if max(rates.values()) else None,
            "loader_alone": {str(s): r for s, r in alone.items()},
            "split_vs_sum_of_lanes": at_plan / both if both else None,
        }
        if sp.get("status") == "ok":
            out["at_plan_vs_ceiling"] = rates[planned] / sp["runs"]["ceiling_synthetic"]["img_s"]
        return out

    run.run("plan", needs_torch(plan), limit_s=args.section_s * 1.5)
    run.run(
        "local_sweep",
        (lambda: local_sweep(photos(), rec, bs, 6 if quick else nb, (1, 2) if quick else (8, 16), left))
        if args.sweep
        else lambda: skipped("optional: --sweep runs it"),
    )


if __name__ == "__main__":
    sys.exit(main())
