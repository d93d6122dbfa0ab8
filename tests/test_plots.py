"""The PNGs of profile and bench: every label reaches matplotlib whole (wrapped, never cut), the
PNG opens, and a note appears when the model and the measurements disagree by more than 2x."""

import pytest
from PIL import Image

from hybridload.cli import _plots as plots
from hybridload.cli._results import ModeResult
from hybridload._extras import MissingExtraError, require
from hybridload.planner import Limits, Measurements, NodeRate, solve
from hybridload.planner._nvml import GpuUnavailable
from hybridload.cli._results import Profile

LONG_GPU_LABEL = (
    "DALI CPU-only mode, no GPU visible, 2 threads, batch 64, decoders.image_random_crop with "
    "libjpeg-turbo fancy upsampling on a machine whose name is deliberately very long indeed"
)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _texts(fig) -> str:
    return _flat(" ".join(plots.figure_texts(fig)))


def _profile(points):
    m = Measurements(
        nodes=(NodeRate("local", 2, 300.0, True),),
        gpu_rate=700.0,
        gpu_available=True,
        gpu_cpu_cost=0.5,
        gpu_label=LONG_GPU_LABEL,
        gpu_time_bound=False,
    )
    lim = Limits()
    return Profile(plan=solve(m, lim), measurements=m, limits=lim, gpu=GpuUnavailable("no NVML here"), points=points)


def test_the_profile_plot_carries_the_whole_gpu_label_and_marks_the_choice(tmp_path):
    prof = _profile([(0.0, 600.0)])
    fig = plots.profile_figure(prof)
    text = _texts(fig)
    assert _flat(LONG_GPU_LABEL) in text
    assert f"chosen GPU share {prof.plan.gpu_share:.2f}" in text
    for label in ("predicted total", "GPU lane", "CPU lanes", "measured (loader)", "chosen split"):
        assert label in text
    ax = fig.axes[0]
    chosen_label = next(t for t in ax.texts if t.get_text().startswith("chosen GPU share"))
    fig.canvas.draw()
    box = chosen_label.get_window_extent()
    curve_top = ax.transData.transform((0, max(prof.plan.predicted["total"], 600.0)))[1]
    assert box.y0 > curve_top  # the choice's label sits above every curve and point
    assert not any("Note:" in t for t in plots.figure_texts(fig))
    path = tmp_path / "p.png"
    plots.save(fig, str(path))
    with Image.open(path) as im:
        im.verify()


def test_a_measurement_more_than_2x_off_the_model_adds_a_note():
    prof = _profile([(0.0, 600.0), (1.0, 20.0)])
    text = _texts(plots.profile_figure(prof))
    assert "Note: at GPU share 1.00 the loader measured 20 images/s" in text and "trust the measured" in text


def test_disagreements_only_beyond_the_factor():
    assert plots.disagreements([(0.5, 100.0)], [199.0]) == []
    assert len(plots.disagreements([(0.5, 100.0)], [201.0])) == 1
    assert len(plots.disagreements([(0.5, 100.0)], [49.0])) == 1


def test_the_bench_plot_names_what_ran_in_every_mode_whole(tmp_path):
    labels = {
        "single-gpu": "GPU lane: " + LONG_GPU_LABEL + "; in-process lane: 2 threads",
        "multi-node": "Ray lane: 6 actors on 3 node(s); GPU lane: " + LONG_GPU_LABEL,
        "cpu": "in-process lane: 2 threads",
    }
    results = [
        ModeResult(mode=k, label=v, images_per_s=100.0 + i, batches=5, images=20, step_ms=3)
        for i, (k, v) in enumerate(labels.items())
    ]
    fig = plots.bench_figure(results)
    text = _texts(fig)
    for mode, label in labels.items():
        assert _flat(f"{mode}: {label}") in text
    path = tmp_path / "b.png"
    plots.save(fig, str(path))
    with Image.open(path) as im:
        im.verify()


def test_wrap_keeps_every_character():
    text = "a" * 150 + " bb ccc\nsecond line " + "x" * 30
    assert plots.wrap(text, 40).replace("\n", "").replace(" ", "") == text.replace("\n", "").replace(" ", "")
    assert max(len(line) for line in plots.wrap(text, 40).splitlines()) <= 40


def test_a_missing_extra_names_it_in_one_line():
    with pytest.raises(
        MissingExtraError, match=r"pip install 'matplotlib>=3.7' \(hybridload's \[plot\] extra\)"
    ) as info:
        require("matplotlib_not_installed_anywhere", "plot", "writing a plot (--plot)")
    assert "\n" not in str(info.value)
