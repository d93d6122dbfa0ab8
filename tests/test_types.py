"""The package type-checks: mypy, with pyproject.toml's [tool.mypy] settings, finds no error in
``hybridload``, its three engines included (``tests/support/typecheck.py``)."""

import pytest

from support.typecheck import ROOT, run_mypy

#: mypy runs in a process of its own (conftest's tiers)
pytestmark = pytest.mark.subprocess


def test_the_package_with_its_engines_passes_mypy():
    code, report = run_mypy(timeout=900)
    errors = [line for line in report.splitlines() if ": error:" in line]
    assert code == 0, f"mypy found {len(errors)} errors:\n" + "\n".join(errors[:200]) + "\n" + report[-2000:]


def test_the_engines_are_packages_inside_hybridload():
    # mypy and every grep see them where the installed package has them: no folder mapped in
    for name in ("_kernels", "_pipelines", "_torchops"):
        assert (ROOT / "hybridload" / name / "__init__.py").is_file(), name
        assert not (ROOT / name).exists(), f"{name}/ at the repository's top again"
