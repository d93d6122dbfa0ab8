"""The code passes the project's lint rules (pyproject.toml's [tool.ruff.lint]): no unused or
undefined name, no import out of place, no mutable default, no misleading comparison."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_benchmarks_and_tests_pass_the_lint_rules():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "hybridload", "kernels", "pipelines", "torchops",
                           "benchmarks", "tests"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_COLOR": "1"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
