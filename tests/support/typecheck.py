"""mypy over the package as it sits in the tree: ``mypy -p hybridload`` from the repository's
root, the three engines (``hybridload/_kernels``, ``hybridload/_pipelines``,
``hybridload/_torchops``) inside it, with pyproject.toml's settings.

``python tests/support/typecheck.py`` prints the errors and exits 1 if there is any;
``tests/test_types.py`` runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_mypy(root: Path = ROOT, timeout: float = 600) -> tuple[int, str]:
    """(mypy's exit status, its report), with pyproject.toml's settings."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(root / "pyproject.toml"),
            "--cache-dir",
            str(root / ".mypy_cache"),
            "--no-color-output",
            "-p",
            "hybridload",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NO_COLOR": "1"},
    )
    return proc.returncode, proc.stdout + proc.stderr


def main() -> int:
    code, report = run_mypy()
    print(report)
    return 1 if code else 0


if __name__ == "__main__":
    sys.exit(main())
