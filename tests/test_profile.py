"""`hybridload profile` end to end (no NVML here: the plan goes on without the GPU reading),
and mode="auto" carrying out and re-planning a split without changing the stream."""

import json
import os
import re
import subprocess
import sys

import pytest
from PIL import Image

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.planner import Plan


def test_profile_cli_writes_a_plan_and_a_png_that_opens(photo_root, tmp_path):
    out, png = tmp_path / "plan.json", tmp_path / "plan.png"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hybridload",
            "profile",
            photo_root,
            "--recipe",
            "imagenet_train:64",
            "--batch-size",
            "8",
            "--seconds",
            "0.5",
            "--sample",
            "24",
            "--out",
            str(out),
            "--plot",
            str(png),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = Plan.load(out)
    assert 0 <= plan.gpu_share <= 1 and plan.predicted["total"] > 0
    meas = json.loads(out.read_text())["measurements"]
    assert "CPU-only stand-in" in meas["gpu_label"]  # labelled as the stand-in
    assert any("NVML" in n for n in meas["notes"])  # the no-NVML path, said plainly
    assert len(meas["checked_points"]) >= 1
    with Image.open(png) as im:
        im.verify()
    with Image.open(png) as im:
        assert im.format == "PNG" and im.size[0] > 300
    for needle in (
        "chosen GPU share",
        "bottleneck",
        "why",
        "GPU (NVML)",
        "none: NVML is not usable",
        "--seconds 0.5 is too short to trust",
    ):  # 0.5 s: a warning row says so
        assert needle in proc.stdout
    # one model: at the shares that set its rates (0 and 1) it predicts what the loader measured, and the
    # plan's prediction at its share is that measurement when the share is one of them
    points = dict(map(tuple, meas["checked_points"]))
    rows = {
        line.split("|")[1].strip(): line.split("|")[2].strip()
        for line in proc.stdout.splitlines()
        if line.startswith("| measured at share")
    }
    for share in (0.0, 1.0):
        model = float(rows[f"measured at share {share:.2f}"].split("the model: ")[1].split(",")[0])
        assert model == pytest.approx(points[share], rel=0.01, abs=1)
    if plan.gpu_share in (0.0, 1.0):
        assert plan.predicted["total"] == pytest.approx(points[plan.gpu_share], rel=0.01)
    if plan.gpu_share in (0.0, 1.0):  # share 1 runs no CPU lane to be limited by; share 0 nothing else
        assert ("the CPUs" in plan.bottleneck) == (plan.gpu_share == 0.0), plan.bottleneck


def test_profile_warns_when_its_measurements_cannot_be_trusted():
    from hybridload.cli._profile import trust_warnings

    assert trust_warnings(3.0, [(0.0, 190, 190), (0.4, 120, 139)]) == []
    (short,) = trust_warnings(1.0, [(0.0, 190, 190)])
    assert "--seconds 1 is too short to trust" in short and "--seconds 2" in short
    (disagree,) = trust_warnings(3.0, [(0.0, 190, 190), (0.26, 305, 126)])  # seen at --seconds 1
    assert "at share 0.26 measured 305 images/s, predicted 126" in disagree and "longer --seconds" in disagree


def test_auto_mode_keeps_the_stream_and_records_replans(photo_root):
    src = sources.ImageFolder(photo_root)
    rec = recipe.imagenet_train(48)

    def stream(policy):
        with HybridLoader(src, rec, 4, policy=policy, seed=2, return_indices=True) as ld:
            out = []
            for e in (0, 1):
                ld.set_epoch(e)
                out += [idx.tolist() for _img, _lab, idx in ld]
            return out, ld.stats()

    ref, _ = stream(LoaderPolicy(mode="cpu", cpu_actors=0))
    got, stats = stream(LoaderPolicy(mode="auto", gpu_engine="dali", cpu_actors=0, threads=1, replan_every=2))
    assert got == ref
    assert set(stats["lanes"]) == {"gpu", "inprocess"}
    assert "replans" in stats["plan"] and 0 <= stats["plan"]["gpu_share"] <= 1
    for entry in stats["plan"]["replans"]:
        assert 0 <= entry["to"] <= 1 and entry["from"] != entry["to"]


def test_auto_mode_starts_from_a_plan_file(photo_root, tmp_path):
    path = tmp_path / "plan.json"
    Plan(gpu_share=0.25, local_threads=1).save(path)
    src = sources.ImageFolder(photo_root)
    with HybridLoader(
        src,
        recipe.imagenet_train(48),
        4,
        policy=LoaderPolicy(mode="auto", gpu_engine="dali", plan=str(path), cpu_actors=0, replan_every=1000),
    ) as ld:
        list(ld)
        st = ld.stats()
    assert st["plan"]["gpu_share"] == 0.25 and st["plan"]["from_plan_file"]
    assert st["lanes"]["gpu"]["batches"] <= 0.25 * 15 + 1


def test_auto_mode_caps_are_written_on_the_dispatcher_thread_only(photo_root, monkeypatch):
    import threading

    from hybridload.execution._admission import ShareAdmission
    from hybridload.planner._online import OnlinePlanner

    writers, hook_threads = [], set()
    real_write, real_done = ShareAdmission.batch_done, OnlinePlanner.batch_done

    def recording_write(self, *args):  # the admission's caps change only here
        before = self.snapshot()
        real_write(self, *args)
        if self.snapshot() != before:
            writers.append(threading.current_thread().name)

    def recording_done(self, *args):
        hook_threads.add(threading.current_thread().name)
        return real_done(self, *args)

    monkeypatch.setattr(ShareAdmission, "batch_done", recording_write)
    monkeypatch.setattr(OnlinePlanner, "batch_done", recording_done)
    policy = LoaderPolicy(
        mode="auto", gpu_engine="dali", cpu_actors=0, threads=1, replan_every=20
    )  # 80 images: enough evidence
    with HybridLoader(sources.ImageFolder(photo_root), recipe.imagenet_train(48), 4, policy=policy, seed=2) as ld:
        for e in (0, 1, 2):
            ld.set_epoch(e)
            list(ld)
        replans = ld.stats()["plan"]["replans"]
    assert hook_threads == {"hybridload-dispatch"}  # the planner is the dispatcher's hook, not the consumer's
    assert set(writers) <= {"hybridload-dispatch"} and len(writers) == len(replans)  # each re-plan: one write there


def test_profile_reads_nvml_for_the_loaders_device_not_nvmls_first(monkeypatch):
    """run_profile hands the loader's device to read_gpu: on cuda:1 it reads GPU-bbbb (fake NVML)."""
    import torch

    from hybridload.cli import _profile as profile
    from hybridload.delivery import _transfer as transfer
    from hybridload.planner._nvml import read_gpu
    from test_planner import DEVICES, FakeNVML

    class Stop(Exception):
        pass

    seen = {}

    def fake_read_gpu(window_s=1.0, **kw):
        seen["device"] = kw.get("device")
        seen["reading"] = read_gpu(
            window_s=0.5,
            interval_s=0.25,
            nvml=FakeNVML(DEVICES),
            env={},
            torch_uuid=lambda i: None,
            sleep=lambda s: None,
            **kw,
        )
        raise Stop  # the rest of the profile needs a real GPU

    monkeypatch.setattr(profile, "read_gpu", fake_read_gpu)
    monkeypatch.setattr(transfer, "default_device", lambda d: torch.device("cuda", 1))
    with pytest.raises(Stop):
        profile.run_profile(list(range(8)), None, batch_size=4, device="cuda:1")
    assert seen["device"] == torch.device("cuda", 1)
    assert seen["reading"].uuid == "GPU-bbbb" and seen["reading"].util_mean > 0.9


#: `hybridload profile` as its console script runs it, with DALI made unimportable when asked
PROFILE_MAIN = """
import sys
if sys.argv.pop(1) == "unimportable":
    sys.modules["nvidia.dali"] = None
from hybridload.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("dali", ["installed", "unimportable"])
def test_profile_says_each_thing_about_the_gpu_lane_once_and_counts_in_words(photo_root, tmp_path, dali, zygote):
    """What profile prints about the GPU lane on a machine without a GPU: no line twice, DALI's
    stand-in explained once where DALI is installed, and where it is not, one row saying so; counts
    as words ("1 thread", never "1 threads")."""
    argv = [photo_root, "--recipe", "imagenet_train:48", "--batch-size", "8", "--seconds", "0.5"]
    proc = zygote.run(
        code=PROFILE_MAIN,
        args=(dali, "profile", *argv, "--sample", "24", "--quiet", "--out", str(tmp_path / "plan.json")),
        cwd=tmp_path,
        env=dict(os.environ),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    about_dali = [line for line in out.splitlines() if "DALI" in line]
    assert len(about_dali) == len(set(about_dali)), about_dali  # nothing said twice
    assert not re.search(r"\b1 (local |remote )?(threads|actors)\b", out), out
    if dali == "installed":
        assert out.count("a stand-in on the CPUs") == 1, about_dali  # the explanation, once
        assert sum("CPU-only mode (no GPU visible)" in line for line in about_dali) == 1, about_dali  # the warning
    else:
        assert about_dali == [ln for ln in about_dali if ln.startswith("| GPU lane")], about_dali
        assert "not installed" in about_dali[0] and "stand-in" in about_dali[0] and len(about_dali) == 1
