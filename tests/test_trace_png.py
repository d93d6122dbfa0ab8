"""The PNG of ``hybridload trace-summary run.json --png out.png`` (`hybridload.cli._trace_png`):
it opens as a PNG, holds one band per worker below the trainer's, and each span is drawn in its
stage's colour where the trace puts it."""

from __future__ import annotations

import json
import time

import pytest
from PIL import Image

from hybridload._batch_result import BatchResult
from hybridload.cli import _trace_png as trace_png
from support.cli_run import run_main
from hybridload.execution._trace import Tracer

#: (lane, worker, node, work s, read s or None, done at s): three workers on two nodes
BATCHES = [
    ("threads", "thread-1", "", 0.20, 0.05, 0.25),
    ("threads", "thread-2", "", 0.20, 0.10, 0.30),
    ("ray", "ray actor a", "node-b", 0.40, None, 0.55),
    ("threads", "thread-1", "", 0.20, 0.05, 0.50),
]


def _trace(path):
    tracer = Tracer(path)
    t = time.perf_counter()  # the picture starts at the trace's first span: only the offsets below count
    for seq, (lane, worker, node, work, read, done) in enumerate(BATCHES):
        result = BatchResult(None, None, None, seconds=work, worker=worker, node=node, read_seconds=read)
        tracer.batch(seq, lane, t + done - work, t + done, result, True)
        tracer.taken(seq, t + done - 0.02, t + done + 0.001)
    tracer.write()
    return tracer


def _colour_at(img, row, t):
    """The pixel colour in the middle of ``row``'s band at ``t`` seconds after the trace's start."""
    scale = (img.width - trace_png.LABEL_W - trace_png.RIGHT) / 1.0  # the test draws 1 s
    return img.getpixel((int(trace_png.LABEL_W + t * scale), trace_png.row_top(row) + trace_png.ROW_H // 2))


def test_the_png_opens_and_has_the_trainers_row_then_one_row_per_worker(tmp_path, capsys):
    _trace(tmp_path / "run.json")
    code, out, err = run_main(
        ["trace-summary", str(tmp_path / "run.json"), "--png", str(tmp_path / "run.png"), "--seconds", "1"], capsys
    )
    assert code == 0, err
    assert f"wrote {tmp_path / 'run.png'}: the first 1 s, 4 rows" in out, out
    with Image.open(tmp_path / "run.png") as img:
        assert img.format == "PNG"
        img = img.convert("RGB")
        img.load()
    rows, _t0 = trace_png.layout(json.loads((tmp_path / "run.json").read_text()), 1.0)
    host = rows[0].name.split(" @ ")[1]  # two nodes: each row names its own
    want = [f"trainer @ {host}", f"thread-1 @ {host}", f"thread-2 @ {host}", "ray actor a @ node-b"]
    assert [r.name for r in rows] == want, rows
    assert img.height == trace_png.row_top(len(rows)) + trace_png.BOTTOM
    start = 0.05  # the first span: thread-1's read of batch 0, at 0.05 s
    c = trace_png.COLOURS
    # thread-1: read 0.05-0.10, decode 0.10-0.25; the gap before its next batch; read 0.30-0.35
    assert _colour_at(img, 1, 0.07 - start) == c["read"]
    assert _colour_at(img, 1, 0.20 - start) == c["decode+augment"]
    assert _colour_at(img, 1, 0.28 - start) == trace_png.BACKGROUND
    assert _colour_at(img, 2, 0.15 - start) == c["read"] and _colour_at(img, 2, 0.25 - start) == c["decode+augment"]
    assert _colour_at(img, 3, 0.30 - start) == c["work"]  # the Ray actor's one span: no read time reported
    assert _colour_at(img, 0, 0.54 - start) == c["stall"]  # the trainer waited for batch 2 at 0.53-0.551 s


def test_a_png_that_cannot_be_written_is_one_line_naming_the_flag(tmp_path, capsys):
    _trace(tmp_path / "run.json")
    code, _out, err = run_main(["trace-summary", str(tmp_path / "run.json"), "--png", str(tmp_path)], capsys)
    assert code not in (0, None) and err.count("\n") == 1 and "--png: cannot write" in err, err


@pytest.mark.parametrize("seconds, step", [(0.5, 0.05), (2.0, 0.2), (30.0, 5)])
def test_the_axis_has_a_round_step_of_at_most_ten_ticks(seconds, step):
    assert trace_png._tick(seconds) == step


def test_a_real_runs_png_has_a_row_for_the_trainer_and_each_lane_thread(photo_root, tmp_path):
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources

    policy = LoaderPolicy(cpu_actors=0, threads=2)
    with HybridLoader(
        sources.ImageFolder(photo_root), recipe.imagenet_eval(32), 4, policy=policy, device="cpu", shuffle=False
    ) as loader:
        with loader.trace(tmp_path / "real.json"):
            for _batch in loader:
                pass
    doc = json.loads((tmp_path / "real.json").read_text())
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert trace_png.write(doc, str(tmp_path / "real.png"), seconds=60.0) == len(threads) == 3, threads
    with Image.open(tmp_path / "real.png") as img:
        assert img.format == "PNG" and img.height == trace_png.row_top(3) + trace_png.BOTTOM


def test_an_empty_trace_draws_no_rows():
    assert trace_png.layout({"traceEvents": []}, 2.0) == ([], 0.0)
