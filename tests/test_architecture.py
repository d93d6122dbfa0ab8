"""The rules of thumb of the code's shape, checked on the source (see CONTRIBUTING.md's map):
no import cycle, no module over 300 lines, no import of another module's private names,
no branching on a lane's name outside ``lanes/``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# package directory -> dotted prefix (pipelines/ and kernels/ install as hybridload.*)
ROOTS = {REPO / "hybridload": "hybridload", REPO / "pipelines": "hybridload.pipelines",
         REPO / "kernels": "hybridload.kernels"}
MAX_LINES = 300


def modules() -> dict[str, Path]:
    out = {}
    for root, prefix in ROOTS.items():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([prefix, *parts])] = path
    return out


def _resolve(mod: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def module_level_imports(mod: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Modules of the package imported at module level (not inside functions)."""
    deps = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(mod, path, node)
            names = [f"{target}.{a.name}" for a in node.names] + [target]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != mod:
                deps.add(name)
    return deps


def test_no_import_cycle_inside_the_package():
    known = modules()
    graph = {m: module_level_imports(m, p, known) for m, p in known.items()}
    # a package imports its own submodules (re-exports); only module-to-module edges make cycles
    graph = {m: {d for d in ds if not m.startswith(d + ".") and not d.startswith(m + ".")} for m, ds in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("mod", sorted(modules()))
def test_no_module_over_300_lines(mod):
    n = len(modules()[mod].read_text().splitlines())
    assert n <= MAX_LINES, f"{mod} has {n} lines; split it by job (limit {MAX_LINES})"


def test_nothing_imports_another_modules_private_names():
    offenders = []
    for mod, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                offenders += [f"{mod}: from {node.module} import {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    assert not offenders, offenders


LANE_NAME_BRANCH = re.compile(r"""(==|!=|\bin)\s*\(?\s*["'](gpu|ray|inprocess|ray-dataset)["']|"""
                              r"""["'](gpu|ray|inprocess)["']\s*(==|!=)|\.get\(\s*["'](gpu|ray|inprocess)["']""")


def test_no_branching_on_a_lane_name_outside_lanes():
    offenders = []
    for mod, path in modules().items():
        if ".lanes" in mod:
            continue
        for k, line in enumerate(path.read_text().splitlines(), 1):
            if LANE_NAME_BRANCH.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{k}: {line.strip()}")
    assert not offenders, offenders
