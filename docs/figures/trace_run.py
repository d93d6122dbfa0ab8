"""The tuning page's timeline (docs/figures/trace.png): a real small run, traced and drawn with
``hybridload trace-summary run.json --png``.

The run: 192 demo photos through ``imagenet_train(224)``, batches of 16, split between two lanes:
the GPU lane (DALI's CPU-only mode on a machine without a GPU, a stand-in that runs the same
pipeline on the CPU) and two threads of the CPU lane; the training step is a 40 ms sleep; two
epochs. On a GPU machine the same script draws the real GPU lane. The first seconds are drawn:
the start-up burst, then the steady state.

    python docs/figures/trace_run.py [--out docs/figures/trace.png] [--seconds 1.6]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.cli._commands import main as cli
from hybridload.cli.demo_data import make_photo_folder

HERE = Path(__file__).resolve().parent


def run(out: Path, seconds: float, step_s: float = 0.04) -> None:
    """Trace one epoch of the run and draw its first ``seconds`` at ``out``."""
    with tempfile.TemporaryDirectory() as tmp:
        root = make_photo_folder(Path(tmp) / "photos", 192)
        policy = LoaderPolicy(mode="split", gpu_share=0.4, gpu_engine="dali", cpu_actors=0, threads=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DALI's CPU-only mode says once that it is a stand-in
            with HybridLoader(sources.ImageFolder(str(root)), recipe.imagenet_train(224), 16, policy=policy) as ld:
                with ld.trace(Path(tmp) / "run.json"):
                    for epoch in range(2):
                        ld.set_epoch(epoch)
                        for _images, _labels in ld:
                            time.sleep(step_s)  # the training step
        cli(["trace-summary", str(Path(tmp) / "run.json"), "--png", str(out), "--seconds", f"{seconds:g}"])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=HERE / "trace.png")
    ap.add_argument("--seconds", type=float, default=1.6)
    args = ap.parse_args()
    run(args.out, args.seconds)
