"""The rules of thumb of the code's shape, checked on the source (see CONTRIBUTING.md's map):
packages import downward only (the FLOORS table), no import cycle, at most 8 modules at the
top of the package, no module over 600 lines (a smell's ceiling: modules split by concept, not
by a count), no import of another module's private names,
no branching on a lane's name outside ``lanes/``, no test helper in the package (nothing
generated tracked under ``benchmarks/``: tests/test_benchmarks_standalone.py, which runs git),
and the public surface is what a reader sees: every internal module has a ``_`` on its path
(docs/decisions/internal-modules-underscored.md).
Every import counts: module-level, inside functions and under ``TYPE_CHECKING``. No process is
started here, so these checks are in the fast tier."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# package directory -> dotted prefix
ROOTS = {REPO / "hybridload": "hybridload"}
MAX_LINES = 600  # a ceiling that flags a module doing several jobs; the shape comes from concepts


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


def imports(mod: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Modules of the package that ``mod`` imports anywhere: at module level, inside
    functions, under ``TYPE_CHECKING``."""
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(mod, path, node)
            # ``from pkg import name``: the submodule pkg.name where there is one, else pkg itself
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != mod:
                deps.add(name)
    return deps


# The floors, top to bottom: a module may import units on its own floor (the cycle test keeps
# those acyclic) and on lower floors, never one above. A unit is a package (its subpackages included) or a top-level module.
FLOORS = (
    ("hybridload", "hybridload.__main__", "hybridload.cli"),  # the faces: API, CLI
    (
        "hybridload._loader",
        "hybridload._dataloader",
        "hybridload._policy",
        "hybridload._loader_checks",
    ),  # what users build
    ("hybridload.planner",),  # decides the split
    ("hybridload.execution",),  # one pass: dispatch, merge
    ("hybridload.lanes",),  # the engines' drivers
    ("hybridload.delivery", "hybridload.raycluster"),  # device moves; Ray nodes
    ("hybridload._kernels", "hybridload._pipelines", "hybridload._torchops"),  # CPU, DALI and torch engines
    ("hybridload.recipe", "hybridload.sources"),  # what to do, to what
    ("hybridload.sampling",),  # which indices, in order
    (
        "hybridload.errors",
        "hybridload._extras",
        "hybridload._compat",
        "hybridload._batch_result",
        "hybridload._environment",
        "hybridload._keyed",
    ),  # shared by every floor
)
MAX_TOP_MODULES = 8


def unit_of(mod: str) -> str:
    """The longest FLOORS unit that holds ``mod``."""
    units = [u for floor in FLOORS for u in floor if mod == u or mod.startswith(u + ".")]
    units = [u for u in units if u != "hybridload" or mod == "hybridload"]
    if not units:
        raise AssertionError(f"{mod} is on no floor: add its package to FLOORS in {Path(__file__).name}")
    return max(units, key=len)


def floor_of(mod: str) -> int:
    unit = unit_of(mod)
    return next(k for k, floor in enumerate(FLOORS) if unit in floor)


def test_every_module_is_on_a_floor():
    for mod in modules():
        unit_of(mod)


def test_imports_run_downward_only():
    known = modules()
    offenders = []
    for mod, path in known.items():
        for dep in imports(mod, path, known):
            if floor_of(dep) < floor_of(mod):
                offenders.append(f"{mod} (floor {floor_of(mod)}) imports {dep} (floor {floor_of(dep)})")
    assert not offenders, "imports that run up a floor:\n" + "\n".join(sorted(offenders))


def test_the_package_top_holds_at_most_8_modules():
    top = sorted(p.name for p in (REPO / "hybridload").glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, f"{len(top)} modules at the top of hybridload/: {top}"


def test_no_test_helper_in_the_package():
    offenders = [m for m in modules() if m.rpartition(".")[2] in ("testing", "slowfs", "bad_files", "fixtures")]
    offenders += [
        f"{m} imports the test tree"
        for m, p in modules().items()
        if re.search(r"^\s*(from|import) (support|tests)\b", p.read_text(), re.M)
    ]
    assert not offenders, offenders


def test_no_import_cycle_inside_the_package():
    known = modules()
    graph = {m: imports(m, p, known) for m, p in known.items()}
    # a package imports its own submodules (re-exports); only module-to-module edges make cycles
    graph = {m: {d for d in ds if not m.startswith(d + ".") and not d.startswith(m + ".")} for m, ds in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                cycle = stack[stack.index(d) :] + [d]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("mod", sorted(modules()))
def test_no_module_over_the_line_ceiling(mod):
    n = len(modules()[mod].read_text().splitlines())
    assert n <= MAX_LINES, f"{mod} has {n} lines; split it by concept (ceiling {MAX_LINES})"


def test_nothing_imports_another_modules_private_names():
    known = modules()
    offenders = []
    for mod, path in known.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                target = _resolve(mod, path, node)
                offenders += [
                    f"{mod}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_")
                    and not a.name.startswith("__")
                    and f"{target}.{a.name}" not in known  # an internal module is no private name
                ]
    assert not offenders, offenders


LANE_NAME_BRANCH = re.compile(
    r"""(==|!=|\bin)\s*\(?\s*["'](gpu|ray|inprocess|ray-dataset)["']|"""
    r"""["'](gpu|ray|inprocess)["']\s*(==|!=)|\.get\(\s*["'](gpu|ray|inprocess)["']"""
)


def test_no_branching_on_a_lane_name_outside_lanes():
    offenders = []
    for mod, path in modules().items():
        if ".lanes" in mod or mod == "hybridload._policy.decode":  # the decoding reads mode="gpu", a policy word
            continue
        for k, line in enumerate(path.read_text().splitlines(), 1):
            if LANE_NAME_BRANCH.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{k}: {line.strip()}")
    assert not offenders, offenders


#: asking Ray about the cluster itself (its nodes, its CPUs, whether this process joined)
ASKS_THE_CLUSTER = re.compile(r"\bray\.(nodes|cluster_resources|available_resources|is_initialized)\(")


def test_only_the_ray_adapter_and_the_ray_lane_ask_the_cluster():
    """What the cluster holds is read through `hybridload.raycluster` (its ``resources``), so a
    plan fitted here and the drop-in's passes decide on the adapter's answers, not Ray's calls."""
    offenders = []
    for mod, path in modules().items():
        if mod.startswith(("hybridload.raycluster", "hybridload.lanes._ray")):
            continue
        for k, line in enumerate(path.read_text().splitlines(), 1):
            if ASKS_THE_CLUSTER.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{k}: {line.strip()}")
    assert not offenders, offenders


def _all_of(path: Path) -> set[str] | None:
    """The names in a module's ``__all__`` (None: it has none)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return None


def test_the_drop_in_reaches_the_core_only_through_its_public_faces():
    """hybridload._dataloader (the torch drop-in) imports from the rest of the package only a
    package's face (its ``__init__``, names in its ``__all__``) or a shared top-level module
    (``errors``, ``extras``): never a module inside another package, as SPDL's adapter uses only
    ``spdl.pipeline``'s public names."""
    known = modules()
    offenders = []
    for mod, path in known.items():
        if not mod.startswith("hybridload._dataloader"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                target, names = _resolve(mod, path, node), [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                target, names = None, [a.name for a in node.names]
            else:
                continue
            for name in [target] if target is not None else names:
                if not name.startswith("hybridload") or name.startswith("hybridload._dataloader"):
                    continue
                face = known.get(name)
                if face is None or not (
                    face.name == "__init__.py" or name in ("hybridload.errors", "hybridload._extras")
                ):
                    offenders.append(f"{mod} imports {name}, not a package's face")
                    continue
                public = _all_of(face)
                offenders += [
                    f"{mod} imports {n} from {name}, not in its __all__"
                    for n in (names if target else ())
                    if public is not None and n not in public
                ]
    assert not offenders, "\n".join(offenders)


#: public modules beyond the faces of the public packages: the module ``hybridload.__all__`` hands
#: out as ``hybridload.sharding``, the photo set the pages and examples import, ``python -m hybridload``
PUBLIC_MODULES = ("hybridload.__main__", "hybridload.sampling.sharding", "hybridload.cli.demo_data")


def public_packages() -> set[str]:
    """The packages the API reference renders (``PACKAGES`` in tests/test_docs.py)."""
    for node in ast.parse((REPO / "tests" / "test_docs.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PACKAGES" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError("tests/test_docs.py has no PACKAGES tuple")


def is_internal(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def test_every_module_outside_the_public_surface_has_an_underscore_on_its_path():
    """docs/decisions/internal-modules-underscored.md: public are ``hybridload``, the packages
    the API reference renders and PUBLIC_MODULES; every other module says it is internal."""
    public = public_packages() | set(PUBLIC_MODULES)
    known = modules()
    plain = sorted(m for m in known if m not in public and not is_internal(m))
    assert not plain, f"internal modules without a _ on their path (name the outermost internal part _...): {plain}"
    assert public <= set(known), f"public modules that are gone: {sorted(public - set(known))}"
    assert not [m for m in public if is_internal(m)]


@pytest.mark.parametrize("package", sorted(public_packages()))
def test_every_name_a_public_package_lists_in_all_imports_from_it(package):
    import importlib

    mod = importlib.import_module(package)
    names = getattr(mod, "__all__", None)
    assert names, f"{package} names its public face in __all__"
    assert not [n for n in names if not hasattr(mod, n)], f"{package}.__all__ lists names it lacks"
    assert not [n for n in names if n.startswith("_") and n != "__version__"]


#: what users read and copy: the README, the guide and reference pages, the examples
USER_TEXT = ("README.md", "docs/index.md", "docs/guide/*.md", "docs/reference/*.md", "examples/*.py")
USER_IMPORT = re.compile(r"^\s*(?:from\s+(hybridload[\w.]*)\s+import\s+([^\n#]+)|import\s+(hybridload[\w.]*))", re.M)
#: a call through an internal path a page tells users to make (``hybridload.x._y.f(...)``)
USER_CALL = re.compile(r"\bhybridload(?:\.\w+)*\._[a-z]\w*(?:\.\w+)*\(")


def test_the_pages_and_examples_import_and_call_only_public_paths():
    offenders = []
    for pattern in USER_TEXT:
        for path in sorted(REPO.glob(pattern)):
            text = path.read_text()
            for m in USER_IMPORT.finditer(text):
                module = m.group(1) or m.group(3)
                names = [n.strip(" ()").split(" as ")[0] for n in (m.group(2) or "").split(",")]
                if is_internal(module) or any(n.startswith("_") for n in names if n):
                    offenders.append(f"{path.relative_to(REPO)}: {m.group(0).strip()}")
            offenders += [f"{path.relative_to(REPO)}: {c.group(0)}" for c in USER_CALL.finditer(text)]
    assert not offenders, "import the public name instead (a package's __all__):\n" + "\n".join(offenders)
