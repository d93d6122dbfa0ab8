"""The pytest plugin the GPU command (tools/gpu_check/gpu_check.py) runs the GPU tests with
(``-p cuda_report``): what it reads of a run. The GPU machine runs this folder copied beside the
installed wheel, with no checkout and none of the suite's conftest, so the plugin registers the
``gpu`` marker itself. Two variables, set by the GPU command:

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
