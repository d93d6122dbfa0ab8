"""The README's code runs as written: each block marked ``<!-- readme-test: NAME -->`` is
extracted and run in a fresh process in an empty directory."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


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
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def test_readme_block_finds_the_marked_block_only():
    text = "```python\nnot me\n```\n<!-- readme-test: a -->\n```python\nx = 1\ny = 2\n```\n"
    assert readme_block("a", text) == "x = 1\ny = 2"
    with pytest.raises(LookupError):
        readme_block("b", text)


def test_the_readme_quickstart_runs_as_written_and_resumes_mid_epoch(tmp_path):
    out = _run(readme_block("quickstart"), tmp_path)
    assert "resumed epoch 1: 2 of 4 batches left" in out  # 64 photos, batches of 16, saved after 2
    assert (tmp_path / "loader.pt").exists() and (tmp_path / "data" / "quickstart-photos").is_dir()


def install_lines(text: str | None = None) -> list[str]:
    """The commands of the README's install block, comments dropped."""
    lines = [line.split("#", 1)[0].strip() for line in readme_block("install", text).splitlines()]
    return [line for line in lines if line]


def test_install_lines_reads_the_commands_without_their_comments():
    text = "<!-- readme-test: install -->\n```bash\npip install '.[ray]'   # a. clone\n# note\npip install x\n```\n"
    assert install_lines(text) == ["pip install '.[ray]'", "pip install x"]


def _sh(cmd: str, venv: Path, cwd: Path, timeout: int = 240) -> str:
    """``cmd`` in a shell whose ``pip``, ``python`` and ``hybridload`` are the venv's, as after ``activate``."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    proc = subprocess.run(
        ["bash", "-c", f"set -e; {cmd}"], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.mark.slow
def test_each_readme_install_line_installs_in_a_fresh_venv_and_runs_the_quickstart(tmp_path):
    """One fresh venv, torch 2.13.0 in it first (the local CPU wheel), as the README says; then each
    install line in turn (the previous hybridload uninstalled), each followed by ``hybridload --version``
    and the quickstart. The README's Python claim is the Python this runs on. About 100 s, with pip's cache."""
    text = README.read_text()
    tested = re.search(r"tested on Python (\d+)\.(\d+) only", text)
    assert tested and tuple(map(int, tested.groups())) == sys.version_info[:2], "the README's tested Python"
    lines = install_lines(text)
    assert len(lines) == 4 and sum("pip install" in line for line in lines) == 4, lines
    clone = tmp_path / "clone"  # what a user has: the committed tree, nothing built in it
    subprocess.run(
        ["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120
    )  # pip clones it again: not shallow
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    _sh("pip install -q torch==2.13.0", venv, tmp_path, timeout=400)
    quickstart = tmp_path / "quickstart.py"
    quickstart.write_text(readme_block("quickstart", text) + "\n")
    # file://localhost/...: pip's requirement parser refuses a git+file:/// URL (no host) that git takes
    steps = [
        lines[0],
        lines[1].replace("https://HOST/PATH/hybridload.git", f"file://localhost{clone}"),
        f"{lines[2]} && {lines[3]}",
    ]
    for i, step in enumerate(steps):
        _sh(f"pip uninstall -q -y hybridload; {step}", venv, clone)
        assert "hybridload 0.1.0" in _sh("hybridload --version", venv, tmp_path)
        run_dir = tmp_path / f"run{i}"
        run_dir.mkdir()
        assert "resumed epoch 1: 2 of 4 batches left" in _sh(f"python {quickstart}", venv, run_dir), step
        site = _sh(
            "python -c 'import hybridload, ray, torch; print(hybridload.__file__, torch.__version__)'", venv, run_dir
        )
        assert str(venv) in site and "2.13.0" in site, site  # the venv's own install, torch kept


def test_no_page_gives_an_install_line_from_pypi():
    """hybridload is not on PyPI: `pip install 'hybridload[...]'` without `@ URL` fails with "No matching
    distribution found". The README's lines and the site's pages give the forms that work."""
    pages = [README, *sorted(p for p in (ROOT / "docs").rglob("*.md") if "decisions" not in p.parts)]  # history
    bad = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in pages
        for m in re.finditer(
            r"pip install[^`\n]*?['\"]?hybridload(\[[^\]]*\])?['\"]?(?!\s*@)(?=[\s`'\"]|$)", p.read_text()
        )
    ]
    assert not bad, "install lines from PyPI, where hybridload is not published:\n" + "\n".join(bad)
