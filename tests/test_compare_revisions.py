"""tools/compare_revisions.py's arithmetic on recorded benchmark documents: rows pair each
repeat's base and head runs, a contestant or ratio missing on one side is left out, and the
side that runs first alternates. Its exporting of a revision runs in
tests/test_benchmarks_standalone.py (it starts git and Python)."""

import importlib
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"


@pytest.fixture
def cr(monkeypatch):
    monkeypatch.syspath_prepend(str(TOOLS))
    return importlib.import_module("compare_revisions")


def doc(rates: dict, ratios: dict | None = None, per_cpu_s: dict | None = None) -> dict:
    return {
        "contestants": {
            k: {"median_images_per_s": v, "median_images_per_cpu_s": (per_cpu_s or {}).get(k)} for k, v in rates.items()
        },
        "ratios": {k: (None if v is None else {"of_medians": v}) for k, v in (ratios or {}).items()},
    }


def test_rows_pair_each_repeat_and_keep_only_what_both_sides_measured(cr):
    base = [
        doc({"raw": 100, "loader": 90, "gone": 5}, {"loader / raw": 0.9}),
        doc({"raw": 200, "loader": 190, "gone": 5}, {"loader / raw": 0.95}),
    ]
    head = [
        doc({"raw": 110, "loader": 99, "new": 7}, {"loader / raw": 0.9}),
        doc({"raw": 180, "loader": 171}, {"loader / raw": 0.95}),
    ]
    rows = {r["row"]: r for r in cr.compare(base, head, goal=0.97)}
    assert set(rows) == {"raw", "loader", "loader / raw"}  # "gone" and "new" are on one side only
    assert all(r["kind"] != "images/CPU-s" for r in cr.compare(base, head))  # not measured: no row
    assert rows["raw"]["paired"] == pytest.approx([1.1, 0.9])
    assert rows["raw"]["base"] == 150 and rows["raw"]["head"] == 145
    assert rows["raw"]["head_over_base"] == pytest.approx(145 / 150) and not rows["raw"]["met"]
    assert rows["loader / raw"]["kind"] == "ratio" and rows["loader / raw"]["head_over_base"] == pytest.approx(1.0)
    assert rows["loader / raw"]["met"]


def test_images_per_cpu_second_is_compared_beside_images_per_second(cr):
    rows = cr.compare([doc({"k": 100.0}, per_cpu_s={"k": 200.0})], [doc({"k": 50.0}, per_cpu_s={"k": 198.0})])
    by_kind = {r["kind"]: r for r in rows}
    assert by_kind["images/s"]["head_over_base"] == pytest.approx(0.5) and not by_kind["images/s"]["met"]
    assert by_kind["images/CPU-s"]["head_over_base"] == pytest.approx(0.99) and by_kind["images/CPU-s"]["met"]


def test_a_ratio_a_run_could_not_compute_is_left_out_not_counted_as_zero(cr):
    base = [doc({"a": 1}, {"a / dali": None})]
    head = [doc({"a": 1}, {"a / dali": 2.0})]
    assert [r["row"] for r in cr.compare(base, head)] == ["a"]


def test_the_side_that_runs_first_alternates(cr):
    assert [cr.order(r) for r in range(3)] == [("base", "head"), ("head", "base"), ("base", "head")]


def test_the_table_shows_base_head_ratio_and_whether_the_goal_is_met(cr):
    rows = cr.compare([doc({"k": 100.0})], [doc({"k": 96.0})], goal=0.97)
    lines = cr.table(rows, goal=0.97)
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert cells[0][-1] == ">= 0.97"
    assert cells[2] == ["k", "images/s", "100.0", "96.0", "0.960x", "0.960x (0.960-0.960)", "**NO**"]


def test_unknown_benchmark_names_are_a_usage_error_naming_the_known_ones(cr, capsys):
    with pytest.raises(SystemExit):
        cr.main(["--base", "HEAD", "--benches", "kernels,nope"])
    assert "unknown benchmark(s) ['nope']; known: loader_overhead, kernels" in capsys.readouterr().err
