"""tools/gpu_check/gpu_check.py runs as a CPU smoke test, so the GPU check cannot rot between GPU runs;
it runs from the built wheel in a venv as bare as the GPU machine (no checkout, Ray, DALI,
scikit-image, torchvision, matplotlib), so it cannot come to need what that machine lacks; and
the logic of its verdicts (exit status, ordering, tolerance, lane record, watchdog) is tested
here directly. No CUDA here: the ordering check runs on a fake stream that defers the work
queued on it, as a stalled CUDA stream does."""

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tools" / "gpu_check" / "gpu_check.py"
HELPERS = (
    "gpu_check.py",
    "_gpu_sections.py",
    "_gpu_ordering.py",
    "_gpu_device.py",
    "_gpu_pixels.py",
    "_gpu_headline.py",
    "_gpu_loaders.py",
)
GPU_SECTIONS = {
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
}


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import _gpu_sections

    return _gpu_sections


def test_gpu_check_quick_on_cpu_passes_and_says_why_each_gpu_section_is_skipped(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # its own photo folder: another run may be rewriting /tmp's
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--sweep", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report) == {"environment"} | GPU_SECTIONS
    status = {k: v["status"] for k, v in report.items()}
    assert status == {
        **dict.fromkeys(report, "ok"),
        "ordering": "skipped",
        "dali_decoders": "skipped",
        "device": "skipped",
        "speed": "skipped",
        "nvml": "skipped",
        "plan": "skipped",
    }, status
    # no torchvision here: the loader's GPU lane falls back, and that is never reported as a GPU figure
    assert "not a GPU figure" in report["speed"]["reason"]
    assert report["speed"]["runs"]["hybridload_gpu"]["img_s"] is None
    assert report["correctness"]["pixels"]["mean_abs_diff_max"] <= 0.5
    assert report["correctness"]["index_streams_identical"] is True
    tol = report["tolerance"]["engines"]["torch"]
    assert set(tol) == {"4:4:4", "4:2:2", "4:2:0", "grey"} and all(r["p99"] <= 2 for r in tol.values())
    assert report["headline"]["lane_alone_img_s"] > 0 and report["headline"]["lane_vs_raw"] > 0
    env = report["environment"]
    assert {"torchvision", "driver", "cpu_model", "dev_shm_gb", "decoder_backend"} <= set(env)
    assert set(report["local_sweep"]) >= {"1", "2"}
    assert "| tolerance torch 4:2:0" in proc.stdout and "| headline" in proc.stdout


def test_sections_past_the_budget_are_skipped_and_the_json_is_written(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--budget-s", "0", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["environment"]["status"] == "ok"
    assert {k: v["status"] for k, v in report.items() if k in GPU_SECTIONS} == dict.fromkeys(GPU_SECTIONS, "skipped")
    assert {v["reason"] for k, v in report.items() if k in GPU_SECTIONS} == {"budget"}


# -- the bare machine: a venv that sees only torch, numpy, Pillow, nvidia-ml-py (and torch's own
# dependencies), with the hybridload wheel built from this checkout and its small dependencies

BARE = ["torch", "numpy", "pillow", "nvidia-ml-py", "simplejpeg", "tqdm", "fsspec", "braceexpand"]
ABSENT = ["ray", "nvidia.dali", "skimage", "torchvision", "matplotlib", "sklearn"]


def _closure(names):
    """The installed distributions ``names`` need at run time (their non-extra requirements, recursively)."""
    try:
        from packaging.markers import Marker
    except ImportError:
        Marker = None
    seen, todo = {}, list(names)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # optional at import time where it is not installed here either
        seen[key] = dist
        for req in dist.requires or []:
            spec, _, marker = req.partition(";")
            if "extra" in marker:
                continue
            if marker.strip() and Marker is not None and not Marker(marker.strip()).evaluate():
                continue
            todo.append(re.match(r"[A-Za-z0-9_.-]+", spec.strip()).group(0))
    return seen


def _expose(dist, site: Path) -> None:
    """Symlink a distribution's top-level files and folders (and its metadata) into ``site``;
    for a namespace folder (no __init__.py, such as nvidia/), one level further down."""
    tops = set()
    for f in dist.files or []:
        parts = Path(f).parts
        if not parts or parts[0] in ("..", "__pycache__") or parts[0].endswith(".data"):
            continue
        root = Path(dist.locate_file(parts[0]))
        if (
            root.is_dir()
            and not (root / "__init__.py").exists()
            and len(parts) > 2
            and not parts[0].endswith((".dist-info", ".libs"))
        ):
            tops.add((parts[0], parts[1]))
        else:
            tops.add((parts[0],))
    for top in sorted(tops):
        target = site.joinpath(*top)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(Path(dist.locate_file(Path(*top))).resolve())


def _copy_source(dst: Path) -> None:
    """What the wheel is built from (not the checkout itself: building writes build/ and *.egg-info)."""
    dst.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, dst / name)

    def skip(d, names):
        return [n for n in names if n == "__pycache__" or os.path.islink(os.path.join(d, n))]

    shutil.copytree(REPO / "hybridload", dst / "hybridload", ignore=skip)


@pytest.mark.timeout(300)
def test_gpu_check_runs_from_the_wheel_in_a_bare_venv(tmp_path):
    """SLOW-ISH CI TEST (~20-60 s on 2 cores): builds the wheel, makes a venv, runs gpu_check twice.

    The GPU machine's situation, here: a built wheel, no checkout on
    sys.path, none of the optional packages. Fails if gpu_check (or hybridload at import) needs Ray,
    DALI, scikit-image, torchvision or matplotlib, or a file of the checkout besides its helper."""
    _copy_source(tmp_path / "src")
    # the setuptools here builds it offline; an older one: pip fetches a new one into an isolated build
    try:
        new_enough = int(metadata.version("setuptools").split(".")[0]) >= 77
    except metadata.PackageNotFoundError:
        new_enough = False
    build = ["--no-build-isolation", "--no-index"] if new_enough else []
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            *build,
            "-w",
            str(tmp_path / "wheels"),
            str(tmp_path / "src"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "wheels").glob("hybridload-*.whl")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(PYTHONNOUSERSITE="1", PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="", TMPDIR=str(tmp_path))
    site = Path(
        subprocess.run(
            [py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
    )
    for dist in _closure(BARE).values():
        _expose(dist, site)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    run = tmp_path / "run"
    run.mkdir()
    for name in HELPERS:
        shutil.copy(SCRIPT.parent / name, run / name)
    probe = (
        "import importlib.util as u, hybridload, hybridload.kernels, torch, PIL, numpy, pynvml; "
        f"print(hybridload.__file__); print([m for m in {ABSENT!r} if u.find_spec(m.split('.')[0])])"
    )
    proc = subprocess.run([py, "-c", probe], cwd=run, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, present = proc.stdout.split("\n")[:2]
    assert where.startswith(str(site)) and present == "[]", proc.stdout  # the wheel, and nothing optional

    proc = subprocess.run(
        [py, "gpu_check.py", "--out", "all.json"], cwd=run, env=env, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no CUDA device" in proc.stderr and "Traceback" not in proc.stderr
    report = json.loads((run / "all.json").read_text())
    assert {k: v["status"] for k, v in report.items() if k in GPU_SECTIONS} == dict.fromkeys(GPU_SECTIONS, "skipped")

    proc = subprocess.run(
        [py, "gpu_check.py", "--device", "cpu", "--quick", "--out", "cpu.json"],
        cwd=run,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "drawing photo-like images instead" in proc.stderr  # no scikit-image: drawn photos
    report = json.loads((run / "cpu.json").read_text())
    status = {k: v["status"] for k, v in report.items()}
    assert all(v in ("ok", "skipped") for v in status.values()) and status["correctness"] == "ok", status
    assert all(v.get("reason") for v in report.values() if v["status"] == "skipped")  # each says why
    assert report["tolerance"]["engines"]["dali"]["status"] == "skipped"
    assert report["correctness"]["pixels"]["mean_abs_diff_max"] <= 0.5


# -- 1. the exit status says a real fault only


def test_a_section_where_no_gpu_decode_ran_is_skipped_never_passed_or_failed(tmp_path, bench):
    run = bench.Sections(str(tmp_path / "r.json"), show=lambda text: None)

    def needs_ray():
        raise ModuleNotFoundError("No module named 'ray'", name="ray")

    run.run("ray", needs_ray)
    run.run("fell_back", lambda: bench.no_gpu_decode("the GPU lane took no batch", faults={"ok": False}))
    run.run("fell_back_and_bad", lambda: {**bench.no_gpu_decode("no lane"), "status": "fail", "ok": False})
    run.run("bug", lambda: 1 / 0)
    report = json.loads((tmp_path / "r.json").read_text())  # written after each section
    assert report["ray"]["status"] == "skipped" and "needs ray" in report["ray"]["reason"]
    assert report["fell_back"]["status"] == "skipped" and "took no batch" in report["fell_back"]["reason"]
    assert report["fell_back_and_bad"]["status"] == "skipped"
    assert report["bug"]["status"] == "error" and "ZeroDivisionError" in report["bug"]["error"]
    assert run.failed() == ["bug"]


def test_an_engine_that_is_not_installed_is_a_reason_not_a_lane(monkeypatch, bench):
    """The old device section imported DaliLane (whose DALI import is lazy, so it succeeded), let the
    loader fall back to the CPU lane and failed the fault test: exit 1 with nothing wrong."""
    import gpu_check

    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # DALI not installed
    why = gpu_check.dali_unavailable(torch.device("cuda", 0))
    assert why and "needs nvidia-dali" in why
    assert gpu_check.dali_unavailable(torch.device("cpu")).startswith("DALI runs here only in its CPU-only mode")
    import _gpu_device

    assert bench.verdict(_gpu_device.no_gpu_decode("the dali GPU lane took no batch"))["status"] == "skipped"


def test_the_watchdog_leaves_a_hung_section_behind_and_the_run_goes_on(tmp_path, bench):
    run = bench.Sections(str(tmp_path / "r.json"), show=lambda text: None, grace_s=0.2)
    seen_left = []

    def honours_budget():
        while run.time_left() > 0:  # a section that reads its budget ends in time
            time.sleep(0.05)
        seen_left.append(run.time_left())
        return {"stopped": True}

    run.run("budgeted", honours_budget, limit_s=0.3)
    run.run("hung", lambda: time.sleep(30), limit_s=0.2)
    run.run("after", lambda: {"x": 1})
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["budgeted"]["status"] == "ok" and report["budgeted"]["seconds"] < 2
    assert report["hung"]["status"] == "error" and "watchdog" in report["hung"]["error"]
    assert "sleep" in report["hung"]["stack"]
    assert report["after"]["status"] == "ok" and run.hung == ["hung"]


# -- 2. the ordering test can fail: a fake stream that defers queued work, a decoder that reuses memory


class DeferringStream:
    """Work queued on it runs only when it is synchronised, as on a stalled CUDA stream."""

    def __init__(self):
        self.queue = []

    def synchronize(self):
        while self.queue:
            self.queue.pop(0)()


class ReusingDecoder:
    """Writes each decode into the same buffers, as nvJPEG writes into memory the caching allocator
    handed back while kernels that read it were still queued."""

    def __init__(self):
        self.bufs = {}

    def __call__(self, datas):
        from hybridload.kernels import decode_image

        out = []
        for k, d in enumerate(datas):
            img = torch.from_numpy(decode_image(d.numpy().tobytes())).permute(2, 0, 1)
            buf = self.bufs.setdefault(k, torch.empty(0, dtype=torch.uint8))
            buf.resize_(img.shape).copy_(img)
            out.append(buf)
        return out


def _deferring_stall(lane):
    lane._stream = stream = DeferringStream()
    real = lane._augment

    def deferred(task, batch, decoded):
        out = torch.empty(lane.recipe.output_shape(len(batch.payloads)), dtype=torch.uint8)
        stream.queue.append(lambda: out.copy_(real(task, batch, decoded)))
        return out

    lane._augment = deferred


def _sync(lane):
    if isinstance(lane._stream, DeferringStream):
        lane._stream.synchronize()


@pytest.fixture
def ordering_lane(photo_root, monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    from hybridload import recipe, sources
    from hybridload.lanes.gpu import LOADER_LANE_FLAGS
    from hybridload.lanes.gpu.torch_lane import TorchGpuLane

    src, rec = sources.ImageFolder(photo_root), recipe.imagenet_train(32)
    return len(src), lambda: TorchGpuLane(
        src, rec, batch_size=4, device="cpu", decode=ReusingDecoder(), **LOADER_LANE_FLAGS
    )


def test_the_stalled_lane_equals_its_unstalled_run_and_the_control_shows_the_hazard(ordering_lane):
    import _gpu_ordering as o

    n, make = ordering_lane
    got = o.stalled_ordering(make, n, 4, stall=_deferring_stall, sync=_sync, batches=4, tries=2)
    assert got["status"] == "ok" and got["equal_batches"] == 4
    assert got["control"].startswith("corrupting") and got["control_corrupted_on_try"] == 1


def test_the_ordering_check_fails_a_lane_without_the_wait(ordering_lane):
    """Without the wait before each decode, the lane's queued ops read the next batch's pixels: the
    check must see it (the old check compared with the CPU lane under host_sync=True, and could not)."""
    import _gpu_ordering as o

    n, make = ordering_lane
    with o.without_the_wait():
        got = o.stalled_ordering(
            make, n, 4, stall=_deferring_stall, sync=_sync, batches=4, tries=1, unguarded=contextlib.nullcontext
        )
    assert got["status"] == "fail" and got["equal_batches"] < 4 and "changed under a stalled stream" in got["reason"]


def test_a_lane_whose_hazard_never_shows_is_reported_as_not_seen_in_n_tries(ordering_lane):
    import _gpu_ordering as o

    n, make = ordering_lane
    got = o.stalled_ordering(make, n, 4, stall=lambda lane: None, sync=_sync, batches=3, tries=2)
    assert got["status"] == "ok" and got["control"] == "hazard not seen in 2 tries"


def test_gpu_check_builds_its_lane_as_the_loader_does(photo_root, monkeypatch, bench):
    """The loader's lanes never wait on the host per batch (host_sync=False) and stay uint8; the
    old ordering check used the default host_sync=True, so its control could never corrupt."""
    import gpu_check
    from hybridload import LoaderPolicy, recipe, sources
    from hybridload.lanes.gpu import build_engine, torch_decoders

    src, rec = sources.ImageFolder(photo_root), recipe.imagenet_train(32)
    monkeypatch.setattr(torch_decoders, "gpu_decoder", lambda device: gpu_check.cpu_decoder)
    loader_built = build_engine(
        "torch", LoaderPolicy(gpu_engine="torch").lane_spec(), src, rec, batch_size=4, device=torch.device("cpu")
    )
    ours = gpu_check.loader_lane(src, rec, 4, torch.device("cpu"))
    try:
        assert (ours.host_sync, ours._normalize) == (loader_built.host_sync, loader_built._normalize) == (False, False)
    finally:
        ours.close()
        loader_built.close()


# -- 3. tolerance: measured, then judged


@pytest.mark.parametrize(
    "row, fault, says",
    [
        ({"mean": 0.09, "p99": 1, "max": 1}, False, "within the documented 0.5"),
        ({"mean": 0.23, "p99": 2, "max": 6}, False, "within the documented 0.5"),  # 4:2:0 without fancy upsampling
        (
            {"mean": 0.77, "p99": 4, "max": 12},
            False,
            "state the measured 0.77 in the docs",
        ),  # the worst image of the proxy
        ({"mean": 3.0, "p99": 3, "max": 3}, True, "fault"),  # every pixel 3 off: not rounding
        ({"mean": 0.4, "p99": 60, "max": 255}, True, "fault"),  # a wrong box on a few images
    ],
    ids=["rounding", "no-fancy-420-mean", "no-fancy-420-worst", "shifted", "wrong-box"],
)
def test_a_rounding_difference_is_stated_never_failed_and_a_gross_one_fails(row, fault, says, bench):
    import _gpu_pixels as p

    verdict, is_fault = p.judge(row)
    assert is_fault is fault and says in verdict


def test_the_difference_statistics_come_from_the_whole_histogram(bench):
    import _gpu_pixels as p

    hist = np.zeros(256, np.int64)
    hist[0], hist[1], hist[7] = 980, 19, 1  # 1000 pixels
    assert p.diff_stats(hist) == {"mean": (19 + 7) / 1000, "p99": 1, "max": 7, "pixels": 1000}


def test_tolerance_measures_each_subsampling_and_fails_only_a_gross_difference(tmp_path, bench):
    import _gpu_pixels as p
    from hybridload import recipe, sources
    from hybridload.cli.demo_data import make_photo_folder
    from hybridload.lanes.cpu_job import process_batch

    src = sources.ImageFolder(str(make_photo_folder(tmp_path / "p", 4, num_classes=1)))
    folders = p.subsampled_folders(src, tmp_path / "sub", 4)
    rec = recipe.imagenet_train(32)

    def engine(offset):
        class Off:  # a "GPU engine" ``offset`` grey levels off the CPU lane
            def __init__(self, src, rec, bs):
                self.src, self.rec = src, rec

            def run_batch(self, task):
                out = process_batch(self.src, self.rec, task.indices, 0, 0)
                out.images.copy_((out.images.int() + offset).clamp(max=255))
                return out

            def describe(self):
                return f"off by {offset}"

            def close(self):
                pass

        return Off

    tol = p.tolerance(folders, rec, 2, {"exact": engine(0), "off": engine(3), "absent": "needs nvidia-dali"})
    assert set(tol["engines"]["exact"]) == {"4:4:4", "4:2:2", "4:2:0", "grey"}
    assert tol["status"] == "fail" and "off on 4:2:0" in tol["reason"] and "exact" not in tol["reason"]
    assert tol["engines"]["off"]["4:4:4"]["max"] == 3
    assert tol["engines"]["absent"] == {"status": "skipped", "reason": "needs nvidia-dali"}
    only_absent = p.tolerance(folders, rec, 2, {"absent": "needs nvidia-dali"})
    assert bench.verdict(only_absent)["status"] == "skipped"


# -- 4. which lane ran each loader figure


def test_a_loader_figure_the_gpu_lane_took_no_batch_of_is_never_a_gpu_figure(bench):
    import _gpu_headline as h

    stats = {"lanes": {"inprocess": {"batches": 10, "images": 80}}}
    assert h.lanes_used(stats) == {"inprocess": 10}
    fell_back = h.gpu_figure(1234.0, h.lanes_used(stats), "gpu")
    assert (
        fell_back["img_s"] is None and fell_back["measured_img_s"] == 1234.0 and "not a GPU figure" in fell_back["note"]
    )
    assert h.gpu_figure(900.0, {"gpu": 6, "inprocess": 4}, "split")["img_s"] == 900.0
    assert h.gpu_figure(500.0, {"inprocess": 10}, "cpu")["img_s"] == 500.0


def test_the_warm_up_is_deeper_than_the_pipeline(bench):
    import _gpu_loaders as lo
    from hybridload import LoaderPolicy

    for workers in (1, 8, 16):
        assert lo.pipeline_depth(workers) > 2 * workers  # hybridload's default window, DataLoader's prefetch
    assert LoaderPolicy().window is None  # None means 2 per worker (policy.py)


def test_pixels_are_read_only_after_the_lanes_ready_event(photo_root, bench):
    """A lane built as the loader builds it does not wait for its own work: reading its images
    before ``result.ready`` reads memory its kernels have not written yet. Here the "kernels" run
    when the event is synchronised; read too early, the batch would be zeros."""
    import _gpu_pixels as p
    from hybridload import recipe, sources
    from hybridload.lanes.cpu_job import process_batch

    src, rec = sources.ImageFolder(photo_root), recipe.imagenet_train(32)

    class Late:
        def __init__(self, src, rec, bs):
            self.src, self.rec = src, rec

        def run_batch(self, task):
            done = process_batch(self.src, self.rec, task.indices, 0, 0)
            final, pending = done.images, torch.zeros_like(done.images)

            class Ready:
                def synchronize(self):
                    pending.copy_(final)

            done.images, done.ready = pending, Ready()
            return done

        def describe(self):
            return "late"

        def close(self):
            pass

    row = p.engine_vs_cpu(Late, src, rec, 4)
    assert row["mean"] == 0 and row["max"] == 0
