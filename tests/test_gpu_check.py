"""tools/gpu_check/gpu_check.py (the GPU tests of tests/gpu/ and the GPU figures) runs as a CPU
smoke test, so the GPU command cannot rot between GPU runs; it runs from the built wheel in a
venv as bare as the GPU machine (no checkout, Ray, DALI, scikit-image, torchvision, matplotlib;
pytest from the carried wheels), so it cannot come to need what that machine lacks; and the
logic of its verdicts (exit status, the tests' record, the goals table, ordering, tolerance,
lane record, watchdog) is tested here directly. No CUDA here: the ordering check runs on a fake stream that defers the work
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
GPU_TESTS = REPO / "tests" / "gpu"
HELPERS = ("gpu_check.py", "_gpu_sections.py", "_gpu_headline.py", "_gpu_loaders.py")
FIGURES = {"headline", "speed", "nvml", "plan", "local_sweep"}
GPU_SECTIONS = {"tests"} | FIGURES
#: what the device tool carries to the GPU machine, the working tree and the wheels together
CARRY_LIMIT = 64 * 2**20


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    monkeypatch.syspath_prepend(str(GPU_TESTS))
    import _gpu_sections

    return _gpu_sections


def _all_skipped_without_cuda(tests: dict) -> None:
    """The tests section on a machine without CUDA: pytest ran every GPU test, each skipped naming why."""
    assert tests["status"] == "ok" and tests["exit_code"] == 0, tests
    assert len(tests["tests"]) >= 10 and {t["outcome"] for t in tests["tests"]} == {"skipped"}
    assert all(t["detail"].startswith("needs a CUDA device") for t in tests["tests"]), tests["tests"][0]


def test_gpu_check_quick_on_cpu_runs_the_gpu_tests_and_every_figure_and_writes_the_table(tmp_path, zygote):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # its own photo folder: another run may be rewriting /tmp's
    proc = zygote.run(
        SCRIPT, args=("--device", "cpu", "--quick", "--sweep", "--out", str(out)), cwd=Path.cwd(), env=env, timeout=400
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report) == {"environment"} | GPU_SECTIONS
    status = {k: v["status"] for k, v in report.items()}
    assert status == {**dict.fromkeys(report, "ok"), "nvml": "skipped"}, status
    _all_skipped_without_cuda(report["tests"])
    # the stand-in engine, built through the lane spec, ran every loader figure on the GPU lane
    assert report["speed"]["runs"]["hybridload_gpu"]["lanes"].get("gpu")
    assert report["headline"]["lane_alone_img_s"] > 0 and report["headline"]["lane_vs_raw"] > 0
    assert report["plan"]["split_vs_sum_of_lanes"] > 0
    env = report["environment"]
    assert {"torchvision", "driver", "cpu_model", "dev_shm_gb", "torch_cuda", "dali", "hybridload"} <= set(env)
    assert set(report["local_sweep"]) >= {"1", "2"}
    table = out.with_suffix(".md").read_text()
    assert "| goal (issue 50) | measured | met |" in table and "CPU stand-in: not a GPU figure" in table
    assert "| test_cuda_lane.py::test_device_memory_stays_flat" in table
    assert table in proc.stdout and "| headline" in proc.stdout


def test_figures_past_the_budget_are_skipped_and_the_json_and_table_are_written(tmp_path, zygote):
    out = tmp_path / "gpu_check.json"
    proc = zygote.run(
        SCRIPT,
        args=("--device", "cpu", "--quick", "--budget-s", "0", "--out", str(out)),
        cwd=Path.cwd(),
        env={**os.environ, "TMPDIR": str(tmp_path)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["environment"]["status"] == "ok" and report["tests"]["status"] == "ok"
    assert {k: v["status"] for k, v in report.items() if k in FIGURES} == dict.fromkeys(FIGURES, "skipped")
    assert {v["reason"] for k, v in report.items() if k in FIGURES} == {"budget"}
    assert "not measured: budget" in out.with_suffix(".md").read_text()


# -- the bare machine: a venv that sees only torch, numpy, Pillow, nvidia-ml-py (and torch's own
# dependencies), with the hybridload wheel built from this checkout and its small dependencies

BARE = ["torch", "numpy", "pillow", "nvidia-ml-py", "simplejpeg", "tqdm", "fsspec", "braceexpand"]
#: carried as wheels with hybridload's (the GPU tests run under them)
CARRIED = ["simplejpeg", "braceexpand", "pytest", "pluggy", "iniconfig", "packaging", "pygments"]
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


@pytest.mark.timeout(420)
def test_gpu_check_runs_from_the_wheel_in_a_bare_venv(tmp_path):
    """SLOW-ISH CI TEST (60-200 s on 2 cores): builds the wheel, makes a venv, runs gpu_check twice.

    The GPU machine's situation, here: a built wheel, pytest and its needs as carried wheels, no
    checkout on sys.path, none of the optional packages. Fails if gpu_check, the GPU tests (or
    hybridload at import) need Ray, DALI, scikit-image, torchvision or matplotlib, or a file of the
    checkout besides the helpers and tests/gpu; and if what travels passes 64 MiB."""
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
    for dist in _closure(BARE + CARRIED).values():
        _expose(dist, site)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    # what the device tool carries: the working tree and the wheels (a wheel is zipped: its
    # installed files bound it from above)
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60
    ).stdout.split(b"\0")
    tree = sum(os.path.getsize(REPO / os.fsdecode(f)) for f in tracked if f and os.path.isfile(REPO / os.fsdecode(f)))
    wheels = wheel.stat().st_size + sum(
        os.path.getsize(dist.locate_file(f))
        for dist in map(metadata.distribution, CARRIED)
        for f in dist.files or []
        if os.path.isfile(dist.locate_file(f))
    )
    print(f"carried to the GPU machine: tree {tree / 2**20:.1f} MiB + wheels <= {wheels / 2**20:.1f} MiB")
    assert tree + wheels < CARRY_LIMIT, (
        f"{(tree + wheels) / 2**20:.1f} MiB carried: over the 64 MiB the GPU machine takes"
    )

    run = tmp_path / "run"
    run.mkdir()
    for name in HELPERS:
        shutil.copy(SCRIPT.parent / name, run / name)
    shutil.copytree(GPU_TESTS, run / "gpu_tests", ignore=shutil.ignore_patterns("__pycache__"))
    probe = (
        "import importlib.util as u, hybridload, hybridload._kernels, torch, PIL, numpy, pynvml, pytest; "
        f"print(hybridload.__file__); print([m for m in {ABSENT!r} if u.find_spec(m.split('.')[0])])"
    )
    proc = subprocess.run([py, "-c", probe], cwd=run, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, present = proc.stdout.split("\n")[:2]
    assert where.startswith(str(site)) and present == "[]", proc.stdout  # the wheel, and nothing optional

    command = [py, "gpu_check.py", "--tests", "gpu_tests"]
    proc = subprocess.run(
        [*command, "--out", "out/all.json"], cwd=run, env=env, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no CUDA device" in proc.stderr and "Traceback" not in proc.stderr
    report = json.loads((run / "out" / "all.json").read_text())
    _all_skipped_without_cuda(report["tests"])
    assert {k: v["status"] for k, v in report.items() if k in FIGURES} == dict.fromkeys(FIGURES, "skipped")
    assert "not installed: it cannot be carried here" in report["environment"]["dali"]
    assert (run / "out" / "all.md").exists() and (run / "out" / "all.tests.jsonl").exists()

    proc = subprocess.run(
        [*command, "--device", "cpu", "--quick", "--out", "cpu.json"],
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
    assert all(v in ("ok", "skipped") for v in status.values()) and status["headline"] == "ok", status
    assert all(v.get("reason") for v in report.values() if v["status"] == "skipped")  # each says why


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
    """DALI cannot travel to the GPU machine: its tests skip saying so, and the run says it plainly."""
    import cuda_checks
    import gpu_check

    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # DALI not installed
    assert cuda_checks.dali_missing() == cuda_checks.DALI_ABSENT
    assert "verified in its CPU-only mode only" in cuda_checks.DALI_ABSENT
    assert gpu_check.dali_record().startswith("not installed: it cannot be carried here")
    assert bench.verdict(bench.no_gpu_decode("the dali GPU lane took no batch"))["status"] == "skipped"


def test_a_failed_gpu_test_fails_the_run_and_a_cut_run_keeps_what_ran(tmp_path, bench):
    lines = tmp_path / "r.jsonl"

    def wrote(*outcomes):
        lines.write_text(
            "".join(
                json.dumps({"test": f"t{k}", "module": "m.py", "outcome": o, "detail": "", "figures": {}}) + "\n"
                for k, o in enumerate(outcomes)
            )
        )

    wrote("passed", "skipped")
    ok = bench.tests_record(lines, 0, "", "9")
    assert "status" not in ok and ok["counts"] == {"passed": 1, "skipped": 1}
    wrote("passed", "failed")
    failed = bench.tests_record(lines, 1, "", "9")
    assert (failed["status"], failed["reason"]) == ("fail", "failed: t1")
    wrote("passed")  # the second test hung: faulthandler ended pytest with the stacks
    hung = bench.tests_record(lines, 1, "Timeout (0:01:00)!\nThread ...", "9")
    assert hung["status"] == "error" and "--test-s" in hung["error"] and hung["counts"] == {"passed": 1}
    cut = bench.tests_record(lines, -9, "", "9", timed_out=True, limit_s=150)
    assert cut["status"] == "error" and "150 s" in cut["error"] and len(cut["tests"]) == 1
    lines.unlink()
    assert bench.tests_record(lines, 4, "usage", "9")["status"] == "error"  # pytest never ran a test


def test_the_table_names_the_machine_and_judges_each_figure_against_its_goal(bench):
    env = {
        "status": "ok",
        "device": "cuda:0",
        "device_name": "NVIDIA H200",
        "driver": "580.1",
        "torch_cuda": "13.0",
        "torch": "2.11.0",
        "torchvision": "0.26.0",
        "dali": "not installed: it cannot be carried here",
    }
    mem = {"at_20_mb": 10.0, "at_150_mb": 12.0, "after_close_mb": 1.0}
    report = {
        "environment": env,
        "tests": {
            "status": "ok",
            "counts": {"passed": 2},
            "tests": [
                {
                    "test": "test_device_memory_stays_flat_over_150_batches_and_returns_after_close",
                    "module": "test_cuda_lane.py",
                    "outcome": "passed",
                    "detail": "",
                    "figures": mem,
                },
                {
                    "test": "test_gpu_engine_pixels_stay_within_rounding_of_the_cpu_lane[torch-4:2:0]",
                    "module": "test_cuda_tolerance.py",
                    "outcome": "passed",
                    "detail": "",
                    "figures": {"mean": 0.31, "p99": 2, "max": 9},
                },
            ],
        },
        "headline": {
            "status": "ok",
            "lane_vs_raw": 0.85,
            "lane_alone_img_s": 9000.0,
            "raw_decode_resize_img_s": 10600.0,
            "raw_decode_img_s": 14000.0,
            "batch": 256,
        },
        "speed": {"status": "skipped", "reason": "budget"},
    }
    table = bench.goals_table(report)
    assert "NVIDIA H200, driver 580.1, CUDA 13.0, torch 2.11.0, torchvision 0.26.0" in table
    assert "DALI: not installed: it cannot be carried here" in table
    rows = {r.split(" | ")[0].lstrip("| "): r for r in table.splitlines() if r.startswith("| ")}
    assert rows["the torch engine's GPU lane >= 0.9x the raw nvJPEG decode + resize, same 256 JPEGs"].endswith(
        "| **no** |"
    )
    assert rows["images/s at batch 256 >= 8,000 (H100-class)"].endswith("| yes |")
    assert "not measured: budget" in rows["ResNet-50 step fed by the loader >= 0.95x synthetic data"]
    assert "+10.0 MiB at batch 20, +12.0 at 150" in rows["device memory flat over 150 batches, back after close()"]
    assert "torch-4:2:0: 0.31 / 2 / 9" in table


def test_the_watchdog_leaves_a_hung_section_behind_and_the_run_goes_on(tmp_path, bench):
    run = bench.Sections(str(tmp_path / "r.json"), show=lambda text: None, grace_s=0.2)
    seen_left = []

    def honours_budget():
        while run.time_left() > 0:  # a section that reads its budget ends in time
            time.sleep(0.05)
        seen_left.append(run.time_left())
        return {"stopped": True}

    run.run("budgeted", honours_budget, limit_s=0.3)
    run.run("hung", lambda: time.sleep(30), limit_s=1.0)  # time for its thread to reach the sleep on a loaded box
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
        from hybridload._kernels import decode_image

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
def ordering_lane(photo_root, monkeypatch, bench):
    """The torch engine's lane as the lane spec builds it, on CPU tensors with a decoder that reuses memory."""
    from hybridload import recipe, sources
    from hybridload.lanes._gpu import torch_decoders

    import cuda_checks

    monkeypatch.setattr(torch_decoders, "gpu_decoder", lambda device: ReusingDecoder())
    src, rec = sources.ImageFolder(photo_root), recipe.imagenet_train(32)
    return len(src), lambda: cuda_checks.spec_gpu_lane(src, rec, 4, "cpu")


def test_the_stalled_lane_equals_its_unstalled_run_and_the_control_shows_the_hazard(ordering_lane):
    import cuda_checks as o

    n, make = ordering_lane
    got = o.stalled_ordering(make, n, 4, stall=_deferring_stall, sync=_sync, batches=4, tries=2)
    assert got["differing_batches"] == [] and got["equal_batches"] == 4
    assert got["control"].startswith("corrupting") and got["control_corrupted_on_try"] == 1


def test_the_ordering_check_fails_a_lane_without_the_wait(ordering_lane):
    """Without the wait before each decode, the lane's queued ops read the next batch's pixels: the
    check must see it (the old check compared with the CPU lane under host_sync=True, and could not)."""
    import cuda_checks as o

    n, make = ordering_lane
    with o.without_the_wait():
        got = o.stalled_ordering(
            make, n, 4, stall=_deferring_stall, sync=_sync, batches=4, tries=1, unguarded=contextlib.nullcontext
        )
    assert got["differing_batches"] and got["equal_batches"] < 4


def test_a_lane_whose_hazard_never_shows_is_reported_as_not_seen_in_n_tries(ordering_lane):
    import cuda_checks as o

    n, make = ordering_lane
    got = o.stalled_ordering(make, n, 4, stall=lambda lane: None, sync=_sync, batches=3, tries=2)
    assert got["differing_batches"] == [] and got["control"] == "hazard not seen in 2 tries"


def test_the_gpu_tests_and_figures_build_their_lanes_through_the_lane_spec(photo_root, monkeypatch, bench):
    """The loader's lanes never wait on the host per batch and stay uint8: the GPU tests and the
    figures get theirs from ``LoaderPolicy.lane_spec`` and ``build_lanes``, never by hand."""
    import _gpu_headline
    import cuda_checks
    import gpu_check
    from hybridload import LoaderPolicy, recipe, sources
    from hybridload.lanes._gpu import make_gpu_lane, torch_decoders

    src, rec = sources.ImageFolder(photo_root), recipe.imagenet_train(32)
    monkeypatch.setattr(torch_decoders, "gpu_decoder", lambda device: gpu_check.cpu_decoder)
    spec = LoaderPolicy(mode="gpu", gpu_engine="torch").lane_spec(device="cpu", recipe=rec)
    lanes = [
        make_gpu_lane(spec, src, rec, batch_size=4, device="cpu"),
        cuda_checks.spec_gpu_lane(src, rec, 4, "cpu"),
        _gpu_headline.spec_lane(src, rec, 4, "cpu"),
    ]
    try:
        assert {(lane.host_sync, lane._normalize, lane.gpu_threads) for lane in lanes} == {
            (False, False, spec.options.gpu.gpu_threads)
        }
    finally:
        for lane in lanes:
            lane.close()
    built_by_hand = re.compile(r"LOADER_LANE_FLAGS|TorchGpuLane\(|DaliLane\(|build_engine\(")
    for path in [*SCRIPT.parent.glob("*.py"), *GPU_TESTS.glob("*.py")]:
        assert not built_by_hand.search(path.read_text()), f"{path.name} builds a lane by hand"


def test_without_cuda_the_spec_builds_no_gpu_lane_and_says_why(photo_root, bench):
    import cuda_checks
    from hybridload import recipe, sources

    src, rec = sources.ImageFolder(photo_root), recipe.imagenet_train(32)
    with pytest.raises(cuda_checks.NoGpuLane, match="GPU lane"):
        cuda_checks.spec_gpu_lane(src, rec, 4, "cpu")


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
    import cuda_checks as p

    verdict, is_fault = p.judge(row)
    assert is_fault is fault and says in verdict


def test_the_difference_statistics_come_from_the_whole_histogram(bench):
    import cuda_checks as p

    hist = np.zeros(256, np.int64)
    hist[0], hist[1], hist[7] = 980, 19, 1  # 1000 pixels
    assert p.diff_stats(hist) == {"mean": (19 + 7) / 1000, "p99": 1, "max": 7, "pixels": 1000}


def test_tolerance_measures_each_subsampling_and_judges_only_a_gross_difference_a_fault(tmp_path, bench):
    import cuda_checks as p
    from hybridload import recipe, sources
    from hybridload.cli.demo_data import make_photo_folder
    from hybridload.lanes._cpu_job import process_batch

    src = sources.ImageFolder(str(make_photo_folder(tmp_path / "p", 4, num_classes=1)))
    folders = p.subsampled_folders(src, tmp_path / "sub", 4)
    assert set(folders) == {"4:4:4", "4:2:2", "4:2:0", "grey"}
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

    for name, folder in folders.items():
        exact = p.engine_vs_cpu(engine(0), sources.ImageFolder(folder), rec, 2)
        off = p.engine_vs_cpu(engine(3), sources.ImageFolder(folder), rec, 2)
        assert exact["max"] == 0 and p.judge(exact) == ("within the documented 0.5", False), name
        assert off["max"] == 3 and p.judge(off)[1] is True, name


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
    # a split at share 0 is the CPU lane alone by design (the plan's sweep and the sum of the lanes)
    assert h.gpu_figure(700.0, {"inprocess": 10}, "split", share=0.0)["img_s"] == 700.0
    assert h.gpu_figure(700.0, {"inprocess": 10}, "split", share=0.3)["img_s"] is None


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
    import cuda_checks as p
    from hybridload import recipe, sources
    from hybridload.lanes._cpu_job import process_batch

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
