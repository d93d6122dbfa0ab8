"""The loader's figures where training is watched (`hybridload.execution._scalars`): a real
loader's ``stats()`` as flat scalars, written every N steps to a recorder with TensorBoard's
``add_scalar`` and, where the ``tensorboard`` package is installed, to the real ``SummaryWriter``
(its event file read back)."""

from __future__ import annotations

import pytest

from hybridload import HybridLoader, LoaderPolicy, StatsWriter, loader_scalars, recipe, sources

REC = recipe.imagenet_eval(32)
LANE_TAGS = ("images_per_s", "share", "retries")
TOP_TAGS = ("images_per_s", "stall_fraction", "stall_s", "retries", "reissued", "skipped")


class Recorder:
    """Stands where a SummaryWriter would: keeps every ``add_scalar`` call."""

    def __init__(self):
        self.calls: list[tuple[str, float, int]] = []

    def add_scalar(self, tag, scalar_value, global_step=None):
        self.calls.append((tag, scalar_value, global_step))


def _loader(photo_root):
    policy = LoaderPolicy(cpu_actors=0, threads=2)
    return HybridLoader(sources.ImageFolder(photo_root), REC, 4, policy=policy, device="cpu", shuffle=False)


def test_the_scalars_are_the_stats_figures_with_the_stall_fraction_and_each_lanes_rate(photo_root):
    with _loader(photo_root) as loader:
        n = sum(1 for _ in loader)
        report = loader.stats()
    got = loader_scalars(report)
    lanes = sorted(report["lanes"])
    assert lanes and set(got) == {f"hybridload/{t}" for t in TOP_TAGS} | {
        f"hybridload/lanes/{lane}/{t}" for lane in lanes for t in LANE_TAGS
    }, sorted(got)
    assert got["hybridload/stall_fraction"] == pytest.approx(report["stall_s"] / report["elapsed_s"])
    assert 0 < got["hybridload/stall_fraction"] < 1 and got["hybridload/images_per_s"] > 0, got
    assert sum(got[f"hybridload/lanes/{lane}/share"] for lane in lanes) == pytest.approx(1.0)
    assert report["batches_delivered"] == n
    assert set(loader_scalars(report, prefix="")) == {t.removeprefix("hybridload/") for t in got}


def test_the_writer_writes_on_the_first_step_and_every_nth_after_it(photo_root):
    rec = Recorder()
    with _loader(photo_root) as loader:
        writer = StatsWriter(loader, rec, every=3)
        written = [writer.step() is not None for _batch in loader]
    assert len(written) >= 7
    assert written == [k % 3 == 0 for k in range(len(written))], written
    steps = sorted({step for _tag, _v, step in rec.calls})
    assert steps == [k for k in range(len(written)) if k % 3 == 0], steps
    per_step = [sum(1 for c in rec.calls if c[2] == s) for s in steps]
    assert len(set(per_step)) == 1 and per_step[0] >= len(TOP_TAGS) + len(LANE_TAGS), per_step
    assert ("hybridload/lanes/inprocess/share", 1.0, steps[-1]) in rec.calls, rec.calls[-12:]


@pytest.mark.parametrize(
    "kw, error, words",
    [
        ({"every": 0}, ValueError, "every must be an int >= 1"),
        ({"writer": object()}, TypeError, "add_scalar(tag, value, step)"),
        ({"loader": object()}, TypeError, "loader must have stats()"),
    ],
)
def test_a_bad_argument_to_the_writer_says_what_to_give(photo_root, kw, error, words):
    with _loader(photo_root) as loader:
        args = {"loader": loader, "writer": Recorder(), **kw}
        with pytest.raises(error) as info:
            StatsWriter(args.pop("loader"), args.pop("writer"), **args)
    assert words in str(info.value), info.value


def test_tensorboards_summary_writer_gets_the_scalars_in_its_event_file(photo_root, tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard package is not installed (no extra brings it)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    tb = SummaryWriter(log_dir=str(tmp_path))
    try:
        with _loader(photo_root) as loader:
            writer = StatsWriter(loader, tb, every=2)
            for step, _batch in enumerate(loader):
                writer.step(step)
            last = loader_scalars(loader.stats())
    finally:
        tb.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"hybridload/stall_fraction", "hybridload/lanes/inprocess/images_per_s"} <= tags == set(last), tags
    steps = [e.step for e in events.Scalars("hybridload/images_per_s")]
    assert steps == list(range(0, steps[-1] + 1, 2)) and len(steps) >= 3, steps
