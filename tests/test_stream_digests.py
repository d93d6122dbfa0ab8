"""The streams of every mode are the ones recorded before the architecture change.

``tests/data/stream_digests.json`` holds, per mode, a digest of three epochs of batches
(indices, labels and, where the lane is a CPU lane, the pixels) taken from the code before
the batch-stream/dispatcher rewrite. A refactor that changes what the model sees fails
here. The recording is tied to the input files (their digest is stored beside it): when
the generated photos differ (another Pillow or scikit-image), the comparison of pixels is
meaningless and the test skips, saying so.

Re-record (only when a change of the stream is intended, and say why in the commit):
``python tests/test_stream_digests.py --record``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.cli.demo_data import make_photo_folder

RECORD = Path(__file__).parent / "data" / "stream_digests.json"
EPOCHS = (0, 1, 2)

# mode name -> (policy keywords, whether the pixels are compared)
MODES = {
    "cpu-inprocess": (dict(mode="cpu", cpu_actors=0, threads=2), True),
    "cpu-inprocess-1thread": (dict(mode="cpu", cpu_actors=0, threads=1, window=1), True),
    "gpu-dali-cpu-only": (dict(mode="gpu", cpu_actors=0, threads=1), False),
    "split-0.5": (dict(mode="split", gpu_share=0.5, cpu_actors=0, threads=1), False),
    "auto": (dict(mode="auto", gpu_engine="dali", cpu_actors=0, threads=1, replan_every=2), False),
}


def _inputs_digest(root: str) -> str:
    h = hashlib.md5()
    for d, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            p = os.path.join(d, f)
            h.update(os.path.relpath(p, root).encode())
            h.update(open(p, "rb").read())
    return h.hexdigest()


def mode_digest(root: str, policy_kw: dict, pixels: bool) -> str:
    """md5 over three epochs of (indices, labels[, pixels]) batches of one mode."""
    h = hashlib.md5()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = HybridLoader(
            sources.ImageFolder(root),
            recipe.imagenet_train(64),
            batch_size=5,
            policy=LoaderPolicy(**policy_kw),
            seed=3,
            device="cpu",
            return_indices=True,
        )
    with loader:
        for e in EPOCHS:
            loader.set_epoch(e)
            for images, labels, indices in loader:
                h.update(indices.numpy().tobytes())
                h.update(labels.numpy().tobytes())
                if pixels:
                    h.update(images.numpy().tobytes())
    return h.hexdigest()


def _make_root(tmp: str) -> str:
    return str(make_photo_folder(Path(tmp) / "photos", 23, num_classes=3, seed=7))


@pytest.fixture(scope="module")
def recorded_root(tmp_path_factory):
    root = _make_root(str(tmp_path_factory.mktemp("digests")))
    rec = json.loads(RECORD.read_text())
    if _inputs_digest(root) != rec["inputs"]:
        pytest.skip(
            "the generated photos differ from the recorded ones (another Pillow or scikit-image): "
            "re-record with python tests/test_stream_digests.py --record"
        )
    return root, rec


@pytest.mark.parametrize("mode", sorted(MODES))
def test_stream_of_every_mode_unchanged_by_refactor(recorded_root, mode):
    root, rec = recorded_root
    kw, pixels = MODES[mode]
    assert mode_digest(root, kw, pixels) == rec["modes"][mode], f"the stream of mode {mode} changed"


def _record() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = _make_root(tmp)
        out = {
            "inputs": _inputs_digest(root),
            "modes": {m: mode_digest(root, kw, px) for m, (kw, px) in sorted(MODES.items())},
        }
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(json.dumps(out, indent=1) + "\n")
    sys.stdout.write(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    if "--record" in sys.argv:
        _record()
