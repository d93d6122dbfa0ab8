"""The package type-checks: mypy, with pyproject.toml's [tool.mypy] settings, finds no error in
``hybridload`` with its kernels and DALI pipelines, read where the installed package has them
(``tests/support/typecheck.py`` says why through a tree of links)."""

import pytest

from support.typecheck import link_tree, repo_path, run_mypy

#: mypy runs in a process of its own (conftest's tiers)
pytestmark = pytest.mark.subprocess


def test_the_package_with_its_kernels_and_pipelines_passes_mypy():
    code, report = run_mypy(timeout=900)
    errors = [line for line in report.splitlines() if ": error:" in line]
    assert code == 0, f"mypy found {len(errors)} errors:\n" + "\n".join(errors[:200]) + "\n" + report[-2000:]


def test_the_link_tree_puts_kernels_and_pipelines_inside_the_package(tmp_path):
    root = tmp_path / "repo"
    for path in ("hybridload/__init__.py", "hybridload/cli/commands.py", "kernels/batch.py", "pipelines/photo.py"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x = 1\n")
    (root / "hybridload/__pycache__").mkdir()
    tree = link_tree(root, tmp_path / "tree")
    package = tree / "hybridload"
    assert sorted(p.name for p in package.iterdir()) == ["__init__.py", "cli", "kernels", "pipelines"]
    assert (package / "kernels/batch.py").resolve() == (root / "kernels/batch.py").resolve()
    assert (package / "pipelines/photo.py").resolve() == (root / "pipelines/photo.py").resolve()
    assert (package / "cli/commands.py").resolve() == (root / "hybridload/cli/commands.py").resolve()
    # rebuilt each time: a module added to the package appears
    (root / "hybridload/new.py").write_text("y = 2\n")
    assert (link_tree(root, tmp_path / "tree") / "hybridload/new.py").exists()


def test_errors_name_the_repository_path_of_a_kernel():
    line = "hybridload/kernels/batch.py:3: error: bad  [arg-type]"
    assert repo_path(line) == "kernels/batch.py:3: error: bad  [arg-type]"
    assert repo_path("hybridload/pipelines/photo.py:1: note") == "pipelines/photo.py:1: note"
    assert repo_path("hybridload/loader.py:1: error") == "hybridload/loader.py:1: error"
