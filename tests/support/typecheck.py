"""mypy over the package as it is installed: ``hybridload`` with ``kernels/`` and ``pipelines/``
inside it as ``hybridload.kernels`` and ``hybridload.pipelines`` (setuptools' ``package-dir`` in
pyproject.toml). mypy reads no ``package-dir``: run on the source tree, it names the kernels
``kernels.*`` and finds none of their ``from hybridload.kernels...`` imports, so every value that
crosses into or out of the kernels would be unchecked. A tree of links puts them where the
installed package has them; mypy then reads the real files through it.

``python tests/support/typecheck.py`` prints the errors (paths as in the repository) and exits 1
if there is any; ``tests/test_types.py`` runs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def package_dirs(root: Path) -> dict[str, str]:
    """Where setuptools puts a top-level source folder inside the package: pyproject.toml's
    package-dir, as {name inside hybridload: folder}."""
    table = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"].get("package-dir", {})
    return {
        name.removeprefix("hybridload."): folder
        for name, folder in table.items()
        if name.startswith("hybridload.") and name.count(".") == 1
    }


MAPPED = package_dirs(ROOT)


def link_tree(root: Path, tree: Path) -> Path:
    """Build ``tree/hybridload``: a link to every entry of ``root/hybridload`` and to each mapped
    folder. Rebuilt on every run (a new module at the top of the package appears); kept at one
    place so that mypy's cache, keyed by path, is reused."""
    package = tree / "hybridload"
    shutil.rmtree(tree, ignore_errors=True)
    package.mkdir(parents=True)
    for entry in sorted((root / "hybridload").iterdir()):
        if entry.name != "__pycache__" and entry.name not in MAPPED:
            (package / entry.name).symlink_to(entry)
    for name, folder in MAPPED.items():
        if (root / folder).is_dir():
            (package / name).symlink_to(root / folder)
    return tree


def repo_path(line: str) -> str:
    """A mypy line with the tree's path of a mapped module put back to its path in the repository."""
    for name, folder in MAPPED.items():
        prefix = f"hybridload/{name}/"
        if line.startswith(prefix):
            return folder + "/" + line[len(prefix) :]
    return line


def run_mypy(root: Path = ROOT, timeout: float = 600) -> tuple[int, str]:
    """(mypy's exit status, its report with repository paths), with pyproject.toml's settings."""
    cache = root / ".mypy_cache"
    tree = link_tree(root, cache / "package-tree")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(root / "pyproject.toml"),
            "--cache-dir",
            str(cache),
            "--no-color-output",
            "-p",
            "hybridload",
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NO_COLOR": "1"},
    )
    report = "\n".join(repo_path(line) for line in (proc.stdout + proc.stderr).splitlines())
    return proc.returncode, report


def main() -> int:
    code, report = run_mypy()
    print(report)
    return 1 if code else 0


if __name__ == "__main__":
    sys.exit(main())
