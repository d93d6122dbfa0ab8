"""The README's code runs as written: each block marked ``<!-- readme-test: NAME -->`` is
extracted and run in a fresh process in an empty directory."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_block(name: str, text: str | None = None) -> str:
    """The fenced code block right after ``<!-- readme-test: name -->``."""
    text = README.read_text() if text is None else text
    m = re.search(rf"<!-- readme-test: {re.escape(name)} -->\s*```\w*\n(.*?)\n```", text, re.S)
    if m is None:
        raise LookupError(f"README.md has no block marked <!-- readme-test: {name} -->")
    return m.group(1)


def _run(code: str, cwd: Path, timeout: int = 300, ray_address: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    if ray_address:  # the test's own cluster: "auto" would find any Ray instance on this machine
        env["RAY_ADDRESS"] = ray_address
    env.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def test_readme_block_finds_the_marked_block_only():
    text = "```python\nnot me\n```\n<!-- readme-test: a -->\n```python\nx = 1\ny = 2\n```\n"
    assert readme_block("a", text) == "x = 1\ny = 2"
    with pytest.raises(LookupError):
        readme_block("b", text)


def test_the_readme_quickstart_runs_as_written_and_resumes_mid_epoch(tmp_path):
    out = _run(readme_block("quickstart"), tmp_path)
    assert "resumed epoch 1: 2 of 4 batches left" in out      # 64 photos, batches of 16, saved after 2
    assert (tmp_path / "loader.pt").exists() and (tmp_path / "data" / "quickstart-photos").is_dir()
