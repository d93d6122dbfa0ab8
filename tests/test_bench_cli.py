"""`hybridload bench` end to end on a small generated dataset with every mode."""

import json
import logging
import os
import sys
from pathlib import Path

import pytest
from PIL import Image

from hybridload.planner import Plan


def test_bench_cli_every_mode_writes_json_and_a_png(photo_root, tmp_path, zygote):
    plan = tmp_path / "plan.json"
    Plan(gpu_share=0.3, local_threads=1).save(plan)
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # multi-node: an embedded cluster
    proc = zygote.run(  # python -m hybridload as -c code, in the session's zygote (torch imported once)
        code="import runpy; runpy.run_module('hybridload', run_name='__main__', alter_sys=True)",
        args=(
            "bench",
            photo_root,
            "--plan",
            str(plan),
            "--modes",
            "single-gpu,multi-node,cpu,gpu",
            "--batches",
            "6",
            "--batch-size",
            "4",
            "--step-ms",
            "5",
            "--recipe",
            "imagenet_train:48",
            "--threads",
            "1",
            "--out",
            str(out),
            "--plot",
            str(png),
            "--quiet",
        ),
        cwd=Path.cwd(),
        timeout=400,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads(out.read_text())
    modes = {m["mode"]: m for m in data["modes"]}
    assert list(modes) == ["single-gpu", "multi-node", "cpu", "gpu"]  # "gpu": the policy's mode name
    for m in modes.values():
        assert m["images_per_s"] > 0 and m["batches"] == 6 and m["images"] == 24
        assert 0 <= m["wait_fraction"] <= 1 and m["step_ms"] == 5
        assert m["peak_rss_mb"] > 50 and m["peak_gpu_mb"] is None
        assert abs(sum(m["shares"].values()) - 1) < 0.01
    for m in modes.values():  # "what ran" names exactly the lanes that took batches
        took = {k for k, v in m["shares"].items() if v > 0}
        assert ("GPU lane" in m["label"]) == ("gpu" in took), m
        assert ("Ray lane" in m["label"]) == ("ray" in took), m
        assert ("in-process lane" in m["label"]) == ("inprocess" in took), m
    assert "DALI CPU-only mode, no GPU visible" in modes["gpu"]["label"]
    assert proc.stderr.count("no GPU lane") == 1, proc.stderr  # single-gpu and multi-node: one note
    assert proc.stderr.count("CPU-only mode (no GPU visible)") == 1, proc.stderr  # "gpu": DALI's stand-in, said once
    assert "GPU lane" not in modes["cpu"]["label"]
    with Image.open(png) as im:
        im.verify()
    table = [ln for ln in proc.stdout.splitlines() if ln.startswith("|")]
    assert len(table) == 6 and len({len(ln) for ln in table}) == 1, proc.stdout  # aligned columns
    assert "| single-gpu |" in proc.stdout and "what ran" in proc.stdout


@pytest.mark.parametrize("dali", ["installed", "unimportable"])
def test_bench_says_no_gpu_lane_once_and_truly_for_this_venv(photo_root, dali, monkeypatch, caplog):
    """Two modes that decode to mode='auto' on a CPU machine (single-gpu, auto): one note, not one a
    mode; it offers DALI's CPU-only stand-in only where DALI is installed."""
    from hybridload import recipe, sources
    from hybridload.cli._bench import run_mode
    from hybridload.lanes import _once as once

    monkeypatch.setattr(once, "_said", set())  # as in a fresh process
    if dali == "unimportable":
        monkeypatch.setitem(sys.modules, "nvidia.dali", None)
    src, rec = sources.ImageFolder(photo_root), recipe.imagenet_train(32)
    with caplog.at_level(logging.WARNING, logger="hybridload"):
        for mode in ("single-gpu", "auto"):
            run_mode(src, rec, mode, batch_size=4, batches=2, step_ms=0, threads=1)
    said = [r.getMessage() for r in caplog.records if "no GPU lane" in r.getMessage()]
    assert len(said) == 1, said
    assert ("stand-in" in said[0] and "would run" in said[0]) is (dali == "installed"), said[0]
    assert ("DALI" in said[0] and "not installed" in said[0]) is (dali == "unimportable"), said[0]
