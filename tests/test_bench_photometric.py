"""The photometric rows of benchmarks/bench_kernels.py: each kernel and DALI operator pair
runs the same images, every row has a ratio, and the flags that pick the rows are checked."""

import importlib
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def photo(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts run as `python benchmarks/x.py`
    return importlib.import_module("_photo_contestants")


def test_every_photometric_row_pairs_a_kernel_with_a_dali_operator_and_has_a_ratio(photo):
    images = [np.random.default_rng(i).integers(0, 256, (32, 32, 3), dtype=np.uint8) for i in range(5)]
    cs = photo.photo_contestants(images, batch_size=2, dali=False)
    assert [c.name for c in cs] == [f"{n}/kernel" for n in photo.NAMES]
    for c in cs:
        c.setup()
        assert c.run(0) == 4  # whole batches only, as DALI gets them
    for n in photo.NAMES:
        assert photo.RATIOS[f"{n} kernel / DALI, 1 thread"] == (f"{n}/kernel", f"{n}/dali", "images_per_s")
        assert set(photo.USES[n]) <= {"b", "c", "s", "h", "sigma"}


def test_dali_operator_rows_run_warm_on_the_same_images(photo):
    pytest.importorskip("nvidia.dali")
    images = [np.random.default_rng(i).integers(0, 256, (24, 24, 3), dtype=np.uint8) for i in range(4)]
    dali = [c for c in photo.photo_contestants(images, batch_size=2, dali=True) if c.name.endswith("/dali")]
    assert [c.name for c in dali] == [f"{n}/dali" for n in photo.NAMES]
    try:
        for c in dali:
            c.setup()  # builds the graph and runs it once, untimed
            assert c.run(0) == 4
    finally:
        for c in dali:
            c.close()


def test_photometric_only_and_no_photometric_exclude_each_other(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCH))
    bench = importlib.import_module("bench_kernels")
    with pytest.raises(SystemExit) as exc:
        bench.main(["--photometric-only", "--no-photometric", "--quick"])
    assert exc.value.code == 2 and "exclude each other" in capsys.readouterr().err
