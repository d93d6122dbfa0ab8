"""benchmarks/gpu_check.py runs as a CPU smoke test, so the GPU check cannot rot between GPU runs;
and it runs from the built wheel in a venv as bare as the GPU machine (no checkout, Ray, DALI,
scikit-image, torchvision, matplotlib), so it cannot come to need what that machine lacks."""

import json
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "gpu_check.py"
GPU_SECTIONS = {"correctness", "ordering", "device", "tolerance", "dali_decoders", "speed", "nvml", "plan", "local_sweep"}


def test_gpu_check_quick_on_cpu_writes_every_section(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report) == {"environment"} | GPU_SECTIONS
    px = report["correctness"]["pixels"]
    assert px["mean_abs_diff_max"] <= 0.5 and px["share_off_by_more_than_2_max"] < 0.01
    assert report["correctness"]["index_streams_identical"] is True
    for mode in ("ceiling_synthetic", "hybridload_gpu", "hybridload_cpu", "torch_dataloader",
                 "hybridload_split_at_plan"):
        assert report["speed"][mode] > 0
    assert 0 <= report["plan"]["planned_share"] <= 1 and set(report["local_sweep"]) >= {"1", "2"}
    tol = report["tolerance"]
    assert tol["status"] == "ok" and tol["readme_mean_tolerance"] == 0.5
    assert set(tol["engines"]["torch"]) == {"4:4:4", "4:2:2", "4:2:0"}
    assert all(r["mean_abs_diff"] <= 0.5 for r in tol["engines"]["torch"].values())
    assert report["dali_decoders"]["status"] == "skipped"  # needs CUDA
    assert report["ordering"]["status"] == "skipped" and "CUDA" in report["ordering"]["reason"]
    assert "| pixels vs CPU lane" in proc.stdout and "| tolerance torch 4:2:0" in proc.stdout


def test_sections_past_the_budget_are_skipped_and_the_json_is_written(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--budget-s", "0",
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
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
        if root.is_dir() and not (root / "__init__.py").exists() and len(parts) > 2 \
                and not parts[0].endswith((".dist-info", ".libs")):
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
    skip = lambda d, names: [n for n in names if n == "__pycache__" or os.path.islink(os.path.join(d, n))]
    for name in ("hybridload", "kernels", "pipelines"):
        shutil.copytree(REPO / name, dst / name, ignore=skip)


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
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *build, "-w",
                           str(tmp_path / "wheels"), str(tmp_path / "src")], capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "wheels").glob("hybridload-*.whl")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(PYTHONNOUSERSITE="1", PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="", TMPDIR=str(tmp_path))
    site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], env=env,
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    for dist in _closure(BARE).values():
        _expose(dist, site)
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index",
                           str(wheel)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]

    run = tmp_path / "run"
    run.mkdir()
    for name in ("gpu_check.py", "_gpu_sections.py", "_gpu_ordering.py", "_gpu_device.py"):
        shutil.copy(REPO / "benchmarks" / name, run / name)
    probe = ("import importlib.util as u, hybridload, hybridload.kernels, torch, PIL, numpy, pynvml; "
             f"print(hybridload.__file__); print([m for m in {ABSENT!r} if u.find_spec(m.split('.')[0])])")
    proc = subprocess.run([py, "-c", probe], cwd=run, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, present = proc.stdout.split("\n")[:2]
    assert where.startswith(str(site)) and present == "[]", proc.stdout  # the wheel, and nothing optional

    proc = subprocess.run([py, "gpu_check.py", "--out", "all.json"], cwd=run, env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no CUDA device" in proc.stderr and "Traceback" not in proc.stderr
    report = json.loads((run / "all.json").read_text())
    assert {k: v["status"] for k, v in report.items() if k in GPU_SECTIONS} == dict.fromkeys(GPU_SECTIONS, "skipped")

    proc = subprocess.run([py, "gpu_check.py", "--device", "cpu", "--quick", "--out", "cpu.json"], cwd=run,
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "drawing photo-like images instead" in proc.stderr  # no scikit-image: drawn photos
    report = json.loads((run / "cpu.json").read_text())
    status = {k: v["status"] for k, v in report.items()}
    assert status == {**dict.fromkeys(report, "ok"), "dali_decoders": "skipped", "ordering": "skipped", "device": "skipped"}, status
    assert report["tolerance"]["engines"]["dali"]["status"] == "skipped"
    assert report["correctness"]["pixels"]["mean_abs_diff_max"] <= 0.5


def test_sections_skip_naming_a_missing_package_and_tolerance_fails_above_the_readme(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import _gpu_sections as g
    from hybridload import recipe, sources
    from hybridload.cli.demo_data import make_photo_folder
    from hybridload.extras import require
    from hybridload.kernels import process_batch

    run = g.Sections(str(tmp_path / "r.json"))
    def needs_ray():
        raise ModuleNotFoundError("No module named 'ray'", name="ray")

    run.run("ray", needs_ray)
    run.run("photos", lambda: require("skimage_not_here", "photos", "photos", package="scikit-image"))
    run.run("bug", lambda: 1 / 0)
    report = json.loads((tmp_path / "r.json").read_text())  # written after each section
    assert report["ray"]["status"] == "skipped" and "needs ray" in report["ray"]["reason"]
    assert report["photos"]["status"] == "skipped" and "scikit-image" in report["photos"]["reason"]
    assert report["bug"]["status"] == "error" and "ZeroDivisionError" in report["bug"]["error"]
    assert run.failed() == ["bug"]

    src = sources.ImageFolder(str(make_photo_folder(tmp_path / "p", 4, num_classes=1)))
    folders = g.subsampled_folders(src, tmp_path / "sub", 4)
    rec = recipe.imagenet_train(32)

    class OffByThree:  # a "GPU engine" 3 grey levels off the CPU lane
        def __init__(self, src, rec, bs):
            self.src, self.rec = src, rec

        def run_batch(self, task):
            out = process_batch(self.src, self.rec, task.indices, 0, 0)
            out.images.copy_((out.images.int() + 3).clamp(max=255))
            return out

        def describe(self):
            return "off by three"

        def close(self):
            pass

    tol = g.tolerance(folders, rec, 2, {"off": OffByThree, "absent": "needs nvidia-dali"})
    assert tol["status"] == "fail" and "off on 4:2:0" in tol["reason"]
    assert tol["engines"]["off"]["4:4:4"]["max_abs_diff"] == 3
    assert tol["engines"]["absent"] == {"status": "skipped", "reason": "needs nvidia-dali"}
