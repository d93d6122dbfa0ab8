"""benchmarks/ runs from a checkout without the test tree: no benchmark module puts tests/ on
sys.path or imports its helpers (tests/support/ holds those; tools/ may import them)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# imports every benchmark module with only benchmarks/ added to the path, as `python benchmarks/x.py` has
PROBE = """
import importlib, pathlib, sys
bench = pathlib.Path(sys.argv[1])
tests = str(bench.parent / "tests")
sys.path.insert(0, str(bench))
for p in sorted(bench.glob("*.py")):
    importlib.import_module(p.stem)
on_path = [e for e in sys.path if e.rstrip("/") == tests]
from_tests = sorted(m for m, mod in sys.modules.items() if (getattr(mod, "__file__", None) or "").startswith(tests))
assert not on_path and not from_tests, (on_path, from_tests)
print("ok", len(list(bench.glob("*.py"))))
"""


def test_no_benchmark_puts_the_test_tree_on_sys_path_or_imports_from_it(zygote):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # in the session's zygote: its child's sys.path is what python -c gives without PYTHONPATH (no tests/)
    proc = zygote.run(code=PROBE, args=(str(REPO / "benchmarks"),), cwd=Path("/"), timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stdout[-2000:] + proc.stderr[-4000:]


def test_an_exported_revision_imports_its_own_package_not_this_checkouts(tmp_path, monkeypatch):
    """compare_revisions times each revision's own code: the package and its engines
    (hybridload._kernels) load from the exported tree, and a tree that lacks them is refused by
    the probe, never served from this checkout."""
    monkeypatch.syspath_prepend(str(REPO / "tools"))
    import compare_revisions as cr

    tree = tmp_path / "rev"
    commit = cr.export("HEAD", tree)
    assert len(commit) == 40 and (tree / "hybridload" / "_kernels" / "__init__.py").is_file()
    cr.check_imports_from(tree)
    shutil.rmtree(tree / "hybridload" / "_kernels")
    with pytest.raises(RuntimeError, match="does not import its own package"):
        cr.check_imports_from(tree)


def test_a_revision_from_before_the_underscored_modules_still_loads_its_own_engine(tmp_path, monkeypatch):
    """An A/B against a revision whose CPU engine was ``hybridload.kernels`` (before the internal
    modules took their ``_``: docs/decisions/internal-modules-underscored.md) probes that name."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    moved = subprocess.run(
        ["git", "rev-list", "-1", "HEAD", "--", "hybridload/kernels/__init__.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    if not moved:
        pytest.skip("this checkout's history holds no hybridload/kernels/")
    monkeypatch.syspath_prepend(str(REPO / "tools"))
    import compare_revisions as cr

    tree = tmp_path / "before"
    cr.export(f"{moved}~1", tree)
    assert (tree / "hybridload" / "kernels" / "__init__.py").is_file()
    cr.check_imports_from(tree)


def test_nothing_generated_is_tracked_under_benchmarks():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "benchmarks"], cwd=REPO, capture_output=True, text=True, timeout=60)
    generated = [
        f for f in out.stdout.split() if f.lower().endswith((".jpg", ".jpeg", ".tar", ".npy", ".idx")) or "/data/" in f
    ]
    assert not generated, f"generated files tracked: {generated[:5]} ... ({len(generated)})"
