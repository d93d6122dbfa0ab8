"""The GPU tests' fixtures, and what the GPU command (tools/gpu_check/gpu_check.py) reads of a run.

This folder runs two ways: in the suite (``pytest -m gpu``: without CUDA every test skips,
naming why), and on the GPU machine, copied beside the installed wheel and run by the GPU
command with no checkout on ``sys.path``. So it imports only torch, numpy, Pillow, pytest and
hybridload, and registers its marker itself. Two variables, set by the GPU command only:

* ``GPU_CHECK_RESULTS``: a file each test's outcome is appended to as one JSON line when it
  ends (its reason or failure and its recorded figures), so a run cut short leaves what ran.
* ``GPU_CHECK_TEST_S``: a test still running this many seconds after it began dumps every
  thread's stack and ends the run (a hung CUDA call cannot be interrupted from Python).
"""

from __future__ import annotations

import faulthandler
import json
import os

import pytest
import torch

from hybridload import recipe, sources
from hybridload.cli.demo_data import make_photo_folder


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skips without one)")


def pytest_runtest_logreport(report):
    path = os.environ.get("GPU_CHECK_RESULTS")
    if not path or not (report.when == "call" or report.outcome != "passed"):
        return
    if report.skipped and isinstance(report.longrepr, tuple):
        detail = report.longrepr[2].removeprefix("Skipped: ")
    elif report.failed:
        detail = str(report.longrepr)[-2000:]
    else:
        detail = ""
    line = {
        "test": report.nodeid.split("::", 1)[-1],
        "module": report.nodeid.split("::", 1)[0].rsplit("/", 1)[-1],
        "when": report.when,
        "outcome": report.outcome,
        "detail": detail,
        "seconds": round(report.duration, 2),
        "figures": dict(report.user_properties),
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line, default=str) + "\n")


@pytest.fixture(autouse=True)
def _gpu_test_limit():
    limit = float(os.environ.get("GPU_CHECK_TEST_S", "0") or 0)
    if limit > 0:
        faulthandler.dump_traceback_later(limit, exit=True)
    yield
    if limit > 0:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def cuda():
    """This process's CUDA device."""
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="session")
def gpu_photos(tmp_path_factory):
    """An ImageFolder of 256 photo JPEGs (crops of real photographs) in 8 classes."""
    root = make_photo_folder(tmp_path_factory.mktemp("gpu-photos"), 256, num_classes=8, seed=0)
    return sources.ImageFolder(str(root))


@pytest.fixture(scope="session")
def rec224():
    """The ImageNet training recipe at 224, uint8 out (the lanes' delivery form)."""
    return recipe.imagenet_train(224)
