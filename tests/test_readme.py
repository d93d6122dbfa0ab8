"""The README's code runs as written: each block marked ``<!-- readme-test: NAME -->`` is
extracted and run in a fresh process in an empty directory."""

import argparse
import json
import os
import re
import shlex
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


#: the modules each extra brings (pyproject.toml's [project.optional-dependencies]), to make the
#: ones the README's install line leaves out unimportable
EXTRA_MODULES = {
    "ray": ("ray",),
    "dali-cu12": ("nvidia.dali",),
    "dali-cu13": ("nvidia.dali",),
    "torch-gpu": ("torchvision",),
    "nvml": ("pynvml",),
    "plot": ("matplotlib",),
    "photos": ("skimage",),
    "lightning": ("lightning",),
    "peers": ("torchdata", "spdl"),
    "docs": ("mkdocs",),
}
#: extras that only name others
ALIASES = ("dali", "dev")


def installed_extras(text: str | None = None) -> set[str]:
    """The extras in the brackets of the README's install lines; every line with brackets names the same."""
    found = {
        frozenset(e.strip() for e in m.group(1).split(","))
        for line in install_lines(text)
        for m in [re.search(r"\[([\w,-]+)\]", line)]
        if m
    }
    assert len(found) == 1, f"the README's install lines name different extras: {found}"
    return set(next(iter(found)))


def readme_commands(text: str | None = None) -> list[list[str]]:
    """Every ``hybridload ...`` command in the README's bash blocks, as argv (continuations joined)."""
    text = README.read_text() if text is None else text
    out = []
    for block in re.findall(r"```bash\n(.*?)\n```", text, re.S):
        for cmd in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(cmd.split("#", 1)[0])
            if argv[:1] == ["hybridload"]:
                out.append(argv[1:])
    return out


def extras_needed(argv: list[str]) -> set[str]:
    """The extras a command line needs: each flag given whose help says "(needs [EXTRA])"."""
    from hybridload.cli._commands import build_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    sub = commands.choices[argv[0]]  # a command the CLI does not have: KeyError, named
    flags = {o for a in sub._actions for o in a.option_strings}
    unknown = [a.split("=")[0] for a in argv[1:] if a.startswith("-") and a.split("=")[0] not in flags]
    assert not unknown, f"`hybridload {argv[0]}` has no flag {unknown}"
    needed = set()
    for action in sub._actions:
        given = any(a == o or a.startswith(o + "=") for a in argv for o in action.option_strings)
        m = re.search(r"needs \[([\w-]+)\]", action.help or "")
        if given and m:
            needed.add(m.group(1))
    return needed


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
    """With only what the README's install line installs: the modules of every other extra (DALI,
    scikit-image, NVML, ...) made unimportable."""
    left_out = sorted({m for e, mods in EXTRA_MODULES.items() if e not in installed_extras() for m in mods})
    block = f"import sys\nsys.modules.update(dict.fromkeys({left_out!r}))  # as if not installed\n"
    out = _run(block + readme_block("quickstart"), tmp_path)
    assert "resumed epoch 1: 2 of 4 batches left" in out  # 64 photos, batches of 16, saved after 2
    assert (tmp_path / "loader.pt").exists() and (tmp_path / "data" / "quickstart-photos").is_dir()


def install_lines(text: str | None = None) -> list[str]:
    """The commands of the README's install block, comments dropped."""
    lines = [line.split("#", 1)[0].strip() for line in readme_block("install", text).splitlines()]
    return [line for line in lines if line]


def test_the_readme_install_line_carries_every_extra_the_readmes_commands_need():
    """`hybridload profile ... --plot plan.png` needs the `plot` extra: after the README's own install
    line a command of the README must not stop at a missing extra."""
    commands = readme_commands()
    assert {argv[0] for argv in commands} >= {"profile", "bench"}, commands
    have = installed_extras()
    for argv in commands:
        assert extras_needed(argv) <= have, f"`hybridload {' '.join(argv)}` needs {extras_needed(argv) - have}"
    assert extras_needed(["profile", "d", "--plot", "p.png"]) == {"plot"}  # the help says so, as read here


def test_every_extra_has_its_modules_named():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRA_MODULES) == set(extras) - set(ALIASES)


def test_the_quickstarts_prose_asks_for_no_extra_the_install_line_leaves_out():
    """An extra named in the quickstart's words is in the install line, or said not to be needed."""
    section = README.read_text().split("<!-- --8<-- [start:quickstart] -->")[1].split("```python")[0]
    have = installed_extras()
    for sentence in re.split(r"(?<=[.:;])\s", " ".join(section.split())):
        for extra in re.findall(r"`([\w-]+)` extra", sentence):
            assert extra in have or "not needed" in sentence, sentence


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
        # pip byte-compiles every file it installs (torch's alone: 23 of its install's 31 CPU-seconds);
        # the interpreter compiles what it imports, and a file that does not compile fails no install.
        # `--no-compile` as a variable: pip reads PIP_COMPILE=0 as it reads the flag (PIP_NO_COMPILE=1 compiles)
        PIP_COMPILE="0",
    )
    proc = subprocess.run(
        ["bash", "-c", f"set -e; {cmd}"], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


#: what an install left in the venv, read without importing hybridload or torch: every
#: distribution's version, where `hybridload` imports from, and each of its installed files with
#: the hash its RECORD gives (pip's own bookkeeping of the install: RECORD, INSTALLER, REQUESTED,
#: direct_url.json, which name the line rather than the package, left out)
INSTALLED = """
import importlib.metadata as md, importlib.util, json
dists = sorted(f"{d.metadata['Name'].lower()}=={d.version}" for d in md.distributions())
bookkeeping = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")
files = sorted(f"{f} {f.hash.value if f.hash else ''}" for f in md.distribution("hybridload").files
               if not f.name in bookkeeping and "__pycache__" not in f.parts)
print(json.dumps({"dists": dists, "origin": importlib.util.find_spec("hybridload").origin, "files": files}))
"""


@pytest.mark.slow
def test_each_readme_install_line_installs_in_a_fresh_venv_and_runs_the_quickstart(tmp_path):
    """One fresh venv, torch 2.13.0 in it first (the local CPU wheel), as the README says; then each
    install line in turn (the previous hybridload uninstalled), each followed by ``hybridload --version``.
    The quickstart runs after the first; each later line must install the same hybridload (every
    file, byte for byte by its RECORD hash) beside the same distributions (torch kept), so the
    quickstart's run holds for it too. The README's Python claim is the Python this runs on. About
    50 CPU-seconds, most of it pip installing torch, Ray and matplotlib (not byte-compiled:
    ``PIP_COMPILE=0``, the interpreter compiles what it imports); twice that with a quickstart per line."""
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
    # as written, then what it ran on: the venv's hybridload and torch, and the `ray` extra's Ray
    check = "import hybridload, ray  # noqa\nprint('RAN ON', hybridload.__file__, torch.__version__)\n"
    quickstart.write_text(readme_block("quickstart", text) + "\n" + check)
    # file://localhost/...: pip's requirement parser refuses a git+file:/// URL (no host) that git takes
    steps = [
        lines[0],
        lines[1].replace("https://HOST/PATH/hybridload.git", f"file://localhost{clone}"),
        f"{lines[2]} && {lines[3]}",
    ]
    first = None
    for step in steps:
        _sh(f"pip uninstall -q -y hybridload; {step}", venv, clone)
        assert "hybridload 0.1.0" in _sh("hybridload --version", venv, tmp_path)
        installed = json.loads(_sh(f"python -c {shlex.quote(INSTALLED)}", venv, tmp_path))
        assert installed["origin"].startswith(str(venv)), installed["origin"]  # the venv's own install
        assert any(d.startswith("torch==2.13.0") for d in installed["dists"]), installed["dists"]  # torch kept
        if first is None:
            first = installed
            (tmp_path / "run").mkdir()
            out = _sh(f"python {quickstart}", venv, tmp_path / "run")
            assert "resumed epoch 1: 2 of 4 batches left" in out, step
            ran_on = out.split("RAN ON", 1)[1].split()
            assert ran_on[0].startswith(str(venv)) and ran_on[1].startswith("2.13.0"), out
        else:  # what the quickstart ran on, installed again by this line
            # every distribution the quickstart ran beside, at its version (line c adds `build`'s own)
            assert set(first["dists"]) <= set(installed["dists"]), (step, set(first["dists"]) - set(installed["dists"]))
            assert installed["files"] == first["files"], (step, set(installed["files"]) ^ set(first["files"]))


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
