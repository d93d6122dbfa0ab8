"""The benchmark scripts import, and the harness they share measures what it says: interleaved
rounds, per-round paired ratios against a baseline, the table's columns. So it cannot rot."""

import importlib
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py"))


@pytest.fixture
def harness(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts run as `python benchmarks/x.py`
    return importlib.import_module("_harness")


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_benchmark_module_imports_without_running(harness, name):
    module = importlib.import_module(name)
    assert module.__doc__, f"benchmarks/{name}.py has no docstring"
    if not name.startswith("_"):
        assert callable(module.main)


def make_contestants(harness, log):
    class Fixed(harness.Contestant):
        """Reports a fixed number of images for a run; records the order it ran in."""

        def __init__(self, name, images):
            self.name, self.images = name, images

        def prepare(self):
            log.append(("prepare", self.name))

        def run(self, epoch):
            log.append((self.name, epoch))
            return {"images": self.images, "note": epoch}

        def finish(self):
            log.append(("finish", self.name))
            return {"finished": True}

    return [Fixed("base", 100), Fixed("double", 200)]


def test_rounds_rotate_who_goes_first_and_discard_warm_up(harness):
    log = []
    cs = make_contestants(harness, log)
    per_round = harness.run_rounds(cs, rounds=3, warmup_rounds=1)
    order = [e for e in log if e[0] in ("base", "double")]
    assert order == [
        ("double", 19_999),
        ("base", 19_999),
        ("base", 0),
        ("double", 0),
        ("double", 1),
        ("base", 1),
        ("base", 2),
        ("double", 2),
    ]
    assert [r["note"] for r in per_round["base"]] == [0, 1, 2]  # extra fields kept, warm-up dropped
    assert all(r["finished"] and r["images"] == 100 for r in per_round["base"])
    assert log[:3] == [("prepare", "double"), ("double", 19_999), ("finish", "double")]


def test_expected_image_count_is_enforced(harness):
    cs = make_contestants(harness, [])
    with pytest.raises(RuntimeError, match="base delivered 100 images, expected 200"):
        harness.run_rounds(cs, rounds=1, warmup_rounds=0, expect=200)


def test_paired_ratios_pair_rounds_against_the_baseline(harness):
    def rounds(rates):
        return [
            {"images": 10, "images_per_s": r, "cpu_s": 1.0, "cpu_util": 1.0, "tree_cpu_util": 1.0, "other_load": 0.0}
            for r in rates
        ]

    results = {
        "base": harness.summarize(rounds([100, 50, 200]), 1),
        "fast": harness.summarize(rounds([110, 100, 220]), 1),
    }
    r = harness.ratio(results, "fast", "base")
    assert r["paired"] == pytest.approx([1.1, 2.0, 1.1])
    assert r["paired_median"] == pytest.approx(1.1) and r["paired_max"] == pytest.approx(2.0)
    assert r["of_medians"] == pytest.approx(110 / 100)
    assert harness.ratio(results, "fast", "absent") is None
    assert results["base"]["median_images_per_s"] == 100 and results["base"]["min_images_per_s"] == 50


def test_contended_counts_other_load_beyond_the_free_cores(harness, monkeypatch):
    monkeypatch.setattr(harness, "usable_cpus", lambda: 2)
    assert not harness.contended(0.2, 1)  # one core free, 0.2 used: within the margin
    assert harness.contended(1.3, 1)
    assert harness.contended(0.3, 2) and not harness.contended(None, 2)


def test_measured_run_table_has_the_named_columns_and_json_round_trips(harness, tmp_path):
    cs = make_contestants(harness, [])
    results = harness.summarize_all(harness.run_rounds(cs, rounds=2, warmup_rounds=0), cs)
    ratios = {"double / base": harness.ratio(results, "double", "base")}
    assert len(ratios["double / base"]["paired"]) == 2  # one ratio per round
    table = harness.results_table(results, skipped={"absent": "not installed"})
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table]
    assert cells[0] == [
        "contestant",
        "threads",
        "median img/s",
        "min",
        "max",
        "CPU util (process / with children)",
        "img per CPU-s",
        "other load",
        "contended rounds",
    ]
    assert cells[2][:2] == ["base", "1"] and cells[-1][:2] == ["absent", "skipped: not installed"]
    assert all(line.count("|") == table[0].count("|") for line in table)
    rt = harness.ratio_table(ratios, {"double / base": 1.5})
    rcells = [[c.strip() for c in line.strip("|").split("|")] for line in rt]
    assert rcells[0] == ["ratio", "of medians", "per round: median (min-max)", "goal", "met"]
    assert rcells[2][0] == "double / base" and rcells[2][3] == ">= 1.5"
    harness.write_json(tmp_path / "r.json", {"contestants": results, "ratios": ratios})
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["contestants"]["double"]["rounds"][0]["images"] == 200


def test_local_lane_bench_compares_each_pipeline_against_a_torch_loader_of_the_same_output(monkeypatch, tmp_path):
    """bench_local_lanes at toy size: both pipelines reported; the normalized torch contestant
    delivers the uint8 contestant's images, scaled and normalized as torchvision's recipe does."""
    import torch

    from hybridload import recipe

    monkeypatch.syspath_prepend(str(BENCH))
    bench = importlib.import_module("bench_local_lanes")
    out = bench.main(
        [
            "--root",
            str(tmp_path),
            "--n",
            "16",
            "--batch-size",
            "8",
            "--size",
            "32",
            "--workers-list",
            "1",
            "--rounds",
            "1",
            "--warmup-rounds",
            "0",
        ]
    )
    assert set(out["runs"]) == {"workers=1,uint8", "workers=1,normalized"}
    for run in out["runs"].values():
        for name in ("threads", "processes", "torch"):
            assert run["contestants"][name]["median_images_per_s"] > 0
        assert run["ratios"]["threads / torch"]["of_medians"] > 0
    assert out["first_batch_s_default"] > 0
    _folder, src = importlib.import_module("_data").photo_source(tmp_path, 16)
    peer = importlib.import_module("_peer_loaders")
    rec = recipe.imagenet_train(32)
    raw, label = peer.PilSample(src, rec)((0, 5))
    norm, label2 = peer.PilSample(src, rec, normalize=True)((0, 5))
    assert raw.dtype == torch.uint8 and norm.dtype == torch.float32 and label == label2
    expect = (raw.float() / 255 - peer.IMAGENET_MEAN) / peer.IMAGENET_STD
    assert torch.allclose(norm, expect, atol=1e-5)
    with pytest.raises(SystemExit):
        bench.main(["--root", str(tmp_path), "--n", "16", "--pipelines", "float16"])
