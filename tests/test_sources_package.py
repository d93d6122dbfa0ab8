"""The sources package: every submodule imports on its own (no import cycle), and the
package re-exports the public names it had as a single module."""

import ast
import json
import pathlib
import subprocess
import sys

import pytest

import hybridload.sources as sources

SUBMODULES = [
    "_base",
    "_filelist",
    "_folder",
    "_read_retry",
    "_reads",
    "_torch_dataset",
    "_tar",
    "_tar.atomic_write",
    "_tar.braces",
    "_tar.manifest",
    "_tar.member_table",
    "_tar.shard_cache",
    "_tar.shard_list",
    "_tar.shard_members",
    "_tar.shard_names",
    "_tar.shard_scan",
    "_tar.shard_checks",
    "_tar.sidecar",
    "_tar.tar_index",
    "_tar.tar_options",
    "_tar.tarshards",
]


#: one fresh interpreter imports the third-party libraries the package stands on (torch alone
#: takes seconds), then forks a child per submodule that imports it first, then the package:
#: no hybridload module is loaded before the child's first import, as in an interpreter of its
#: own; prints one JSON line {name: error or ""}
FIRST_IMPORTS = """
import json, os, sys, traceback
import numpy, PIL.Image, torch  # noqa: F401  (not hybridload: the order among its modules is the test)
assert not [m for m in sys.modules if m.split(".")[0] == "hybridload"]
out = {}
for name in sys.argv[1:]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            __import__("hybridload.sources." + name)
            import hybridload.sources, hybridload  # noqa: F401, E401
            err = ""
        except BaseException:
            err = traceback.format_exc()
        os.write(w, err.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        err = f.read().decode()
    _, status = os.waitpid(pid, 0)
    out[name] = err or ("" if status == 0 else f"the child ended with status {status}")
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def first_imports():
    run = subprocess.run(
        [sys.executable, "-c", FIRST_IMPORTS, *SUBMODULES], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", SUBMODULES)
def test_each_sources_submodule_imports_first_in_a_fresh_interpreter(name, first_imports):
    assert first_imports[name] == "", first_imports[name]


def _sources_imports(name: str) -> set[str]:
    """The sources modules that ``hybridload/sources/<name>.py`` (dotted below ``sources``)
    imports ("" = the package; a sub-package's ``__init__`` is its name)."""
    path = pathlib.Path(sources.__file__).parent.joinpath(*name.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                raise AssertionError(f"sources/{name}: relative import of {mod!r}; write the absolute name")
            if mod == "hybridload.sources" or mod.startswith("hybridload.sources."):
                found.add(mod[len("hybridload.sources.") :] if "." in mod[len("hybridload.") :] else "")
            elif mod == "hybridload" and any(a.name == "sources" for a in node.names):
                found.add("")
    return found


def test_sources_submodules_import_each_other_without_a_cycle():
    graph = {name: _sources_imports(name) for name in SUBMODULES}
    for name, deps in graph.items():
        deps.discard(name)
        assert "" not in deps, f"sources/{name}.py imports the package itself (a cycle through __init__)"
        assert deps <= set(SUBMODULES), f"sources/{name}.py imports {deps - set(SUBMODULES)}"
    done: set[str] = set()

    def visit(name, path):
        assert name not in path, f"import cycle: {' -> '.join(path + [name])}"
        if name not in done:
            for dep in graph[name]:
                visit(dep, path + [name])
            done.add(name)

    for name in SUBMODULES:
        visit(name, [])


def test_sources_package_reexports_every_public_name_in_all():
    for name in sources.__all__:
        assert hasattr(sources, name), name
    for name in ("Source", "SampleRef", "FileList", "ImageFolder", "TarShards", "TorchDataset", "read_error"):
        assert name in sources.__all__
    assert issubclass(sources.ImageFolder, sources.FileList)
    assert all(
        issubclass(c, sources.Source)
        for c in (sources.FileList, sources.ImageFolder, sources.TarShards, sources.TorchDataset)
    )


def test_read_error_names_the_cause_without_the_path():
    exc = FileNotFoundError(2, "No such file or directory", "/secret/path.jpg")
    assert sources.read_error(exc) == "FileNotFoundError: No such file or directory"
    assert sources.read_error(ValueError("bad")) == "ValueError: bad"


def test_every_package_of_the_tree_is_in_the_wheel():
    """pyproject.toml lists the packages the wheel carries; a package missing there imports from a
    checkout (an editable install) and fails from a wheel (ModuleNotFoundError at import)."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    tree = {".".join(p.parent.relative_to(root).parts) for p in (root / "hybridload").rglob("__init__.py")}
    tree |= {
        "hybridload._kernels",
        "hybridload._pipelines",
        "hybridload._torchops",
    }  # mapped from the top-level folders
    assert tree <= listed, f"packages missing from pyproject.toml's [tool.setuptools] packages: {sorted(tree - listed)}"
