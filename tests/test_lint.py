"""The code passes the project's lint rules (pyproject.toml's [tool.ruff.lint]): no unused or
undefined name, no import out of place, no mutable default, no misleading comparison; and it is
laid out as `ruff format` lays it out ([tool.ruff.format]), so a diff shows changes, not layout."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: what the lint and the format check read
CHECKED = ["hybridload", "benchmarks", "tools", "docs/figures", "tests"]


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache", *CHECKED],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )


def test_the_package_benchmarks_and_tests_pass_the_lint_rules():
    proc = ruff("check")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_package_benchmarks_and_tests_are_laid_out_as_ruff_format_lays_them_out():
    proc = ruff("format", "--check")
    assert proc.returncode == 0, (
        "`.venv/bin/python -m ruff format "
        + " ".join(CHECKED)
        + "` lays these out:\n"
        + proc.stdout[-4000:]
        + proc.stderr[-2000:]
    )
