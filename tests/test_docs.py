"""The documentation site holds what it shows: every public name documented (each argument
described), every Python block on a page run as written, every error and exit status on the
troubleshooting page, every test a guarantee cites still there, every page in the navigation.

The site itself is built in strict mode by ``make docs`` (part of ``.ci/run``)."""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import griffe
import pytest
import yaml

import hybridload
import hybridload.cli
import hybridload.errors

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: the packages whose ``__all__`` the API reference renders (docs/api/*.md)
PACKAGES = (
    "hybridload",
    "hybridload.recipe",
    "hybridload.sources",
    "hybridload.sampling",
    "hybridload.planner",
    "hybridload.errors",
    "hybridload.execution",
    "hybridload.lanes",
    "hybridload.delivery",
    "hybridload.raycluster",
    "hybridload.cli",
)
FENCE = re.compile(r"(?:<!-- docs-test: ([\w-]+)( ray)? -->\s*\n)?```(\w*)\n(.*?)\n```", re.S)
INCLUDE = re.compile(r'^--8<-- "([^":]+)(?::[\w-]+)?"$')
#: files whose code the suite runs elsewhere, so a page may include them
RUN_ELSEWHERE = {"README.md": "tests/test_readme.py", "examples/lightning_module.py": "tests/test_lightning_example.py"}


def public_objects():
    """(qualified name, object) for every class and function a package names in ``__all__``."""
    seen = set()
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        names = getattr(mod, "__all__", None) or [n for n in vars(mod) if not n.startswith("_")]
        for name in names:
            obj = getattr(mod, name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and id(obj) not in seen:
                if getattr(obj, "__module__", "").startswith("hybridload"):
                    seen.add(id(obj))
                    yield f"{pkg}.{name}", obj


def described_names(doc: str) -> set[str]:
    """The names a Google-style docstring describes (Args, Attributes, Other Parameters)."""
    logging.getLogger("griffe").setLevel(logging.ERROR)  # "no type" notes: the strict site build checks types
    names = set()
    for section in griffe.parse_google(griffe.Docstring(doc)):
        if section.kind.value in ("parameters", "other parameters", "attributes"):
            names |= {item.name for item in section.value}
    return names


def parameters(obj) -> list[str]:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in sig.parameters.values()
        if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def undocumented(obj) -> list[str]:
    """Why ``obj``'s docs fall short: no docstring, or the parameters it does not describe."""
    doc = inspect.getdoc(obj) or ""
    if not doc.strip():
        return ["no docstring"]
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return []  # an error's arguments are its message, which the troubleshooting page explains
    have = described_names(doc)
    if inspect.isclass(obj) and obj.__init__ is not object.__init__ and obj.__init__.__doc__:
        have |= described_names(inspect.getdoc(obj.__init__))
    return [f"argument {name!r} not described" for name in parameters(obj) if name not in have]


def test_described_names_reads_args_and_attributes_sections():
    doc = "Summary.\n\nArgs:\n    a: one.\n    b: two.\n\nAttributes:\n    c: three.\n"
    assert described_names(doc) == {"a", "b", "c"}
    assert undocumented(lambda a, b: None) == ["no docstring"]


def test_every_public_name_has_a_docstring_that_describes_every_argument():
    missing = {name: why for name, obj in public_objects() if (why := undocumented(obj))}
    assert not missing, "document these (Google style: an Args or Attributes section):\n" + "\n".join(
        f"  {name}: {', '.join(why)}" for name, why in sorted(missing.items())
    )


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def python_blocks():
    """(page, marker name, needs ray, code) for every Python block of the site."""
    for page in pages():
        for m in FENCE.finditer(page.read_text()):
            name, ray, lang, code = m.groups()
            if lang == "python":
                yield page.relative_to(ROOT), name, bool(ray), code


def test_every_python_block_is_run_or_included_from_code_the_suite_runs():
    unmarked = []
    for page, name, _ray, code in python_blocks():
        lines = [line for line in code.strip().splitlines() if line.strip()]
        includes = [INCLUDE.match(line.strip()) for line in lines]
        if lines and all(includes):
            unrun = [m.group(1) for m in includes if m.group(1) not in RUN_ELSEWHERE]
            assert not unrun, f"{page} includes {unrun}, which no test runs"
        elif name is None:
            unmarked.append(f"{page}: {lines[0] if lines else '(empty)'}")
    assert not unmarked, (
        "mark each Python block <!-- docs-test: NAME --> (it is then run) or include it "
        "from code the suite runs:\n" + "\n".join(unmarked)
    )


RUNNABLE = [
    pytest.param(code, ray, id=f"{page.stem}-{name}") for page, name, ray, code in python_blocks() if name is not None
]


@pytest.mark.parametrize("code, needs_ray", RUNNABLE)
def test_the_python_blocks_of_the_site_run_as_written(code, needs_ray, tmp_path, request, zygote):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if needs_ray:  # the test's own cluster, named the way users name theirs
        env["RAY_ADDRESS"] = request.getfixturevalue("ray_cluster")[0].address
    script = tmp_path / "snippet.py"
    script.write_text(code + "\n")
    proc = zygote.run(script, cwd=tmp_path, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]


def error_classes() -> list[type]:
    from hybridload._extras import MissingExtraError
    from hybridload.planner import PlanFormatError

    found = [
        obj
        for obj in vars(hybridload.errors).values()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == "hybridload.errors"
    ]
    return found + [PlanFormatError, MissingExtraError]


def test_troubleshooting_names_every_error_class_and_every_exit_status():
    text = (DOCS / "guide" / "troubleshooting.md").read_text()
    missing = [cls.__name__ for cls in error_classes() if f"`{cls.__name__}`" not in text]
    assert not missing, f"docs/guide/troubleshooting.md does not explain {missing}"
    main_doc = inspect.getdoc(hybridload.cli.main)
    statuses = sorted(set(re.findall(r"\b(\d+) (?:done|a usage|an optional|interrupted)", main_doc)))
    assert statuses == ["0", "1", "130", "2"], main_doc
    for status in statuses:
        assert re.search(rf"^\| {status} \|", text, re.M), f"exit status {status} is not on the troubleshooting page"


def test_every_test_a_guarantee_cites_exists():
    text = (DOCS / "guide" / "guarantees.md").read_text()
    cited = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", text)
    assert len(cited) >= 10
    gone = [
        f"{path}::{name}"
        for path, name in cited
        if not re.search(rf"^\s*def {name}\(", (ROOT / path).read_text(), re.M)
    ]
    assert not gone, f"docs/guide/guarantees.md cites tests that are gone: {gone}"


def test_every_page_is_in_the_navigation_and_every_entry_is_a_page():
    def entries(nav):
        for item in nav:
            for value in item.values() if isinstance(item, dict) else [item]:
                yield from (entries(value) if isinstance(value, list) else [value])

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = set(entries(config["nav"]))
    on_disk = {str(p.relative_to(DOCS)) for p in pages()}
    assert listed == on_disk, f"only in nav: {listed - on_disk}; only on disk: {on_disk - listed}"


def test_except_hybridloaderror_catches_every_error_the_troubleshooting_page_names():
    outside = [cls.__name__ for cls in error_classes() if not issubclass(cls, hybridload.HybridLoadError)]
    assert not outside, f"not HybridLoadErrors, though the troubleshooting page says all are: {outside}"
    from hybridload._extras import MissingExtraError
    from hybridload.planner import PlanFormatError

    assert issubclass(PlanFormatError, ValueError) and issubclass(MissingExtraError, ImportError)  # old bases kept


#: a measured figure as the pages write one: a ratio with decimals (``1.26x``), a rate (``3,257 images/s``,
#: ``0.31 GB/s``, ``51 batches/s``) or a memory size in GiB. Round numbers of the design (``4x fewer bytes``,
#: a default's ``120 s``) are not figures.
FIGURE = re.compile(r"(?<![\w.,])(\d[\d,]*\.\d+x|\d[\d,]*(?:\.\d+)? (?:images/s|img/s|batches/s|GB/s|GiB)\b)")


def figures(text: str) -> list[str]:
    """The figures of a page, each as its number (commas dropped) and unit."""
    return [m.replace(",", "") for m in FIGURE.findall(text)]


def test_figures_reads_ratios_rates_and_sizes_and_not_design_numbers():
    text = "1.05-1.26x the threads; 3,257 images/s; 0.31 GB/s; 0.75 GiB; 4x fewer bytes; 120 s; v1.2x"
    assert figures(text) == ["1.26x", "3257 images/s", "0.31 GB/s", "0.75 GiB"]


def test_every_figure_on_the_user_pages_is_in_benchmarks_results():
    """A number a user reads as measured has its entry, with the command, in benchmarks/RESULTS.md."""
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text().replace(",", "")
    user_pages = [ROOT / "README.md"] + [p for p in pages() if p.relative_to(DOCS).parts[0] != "decisions"]
    missing = []
    for page in user_pages:
        for fig in figures(page.read_text()):
            number = fig.split()[0].rstrip("x")
            if not re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", results):
                missing.append(f"{page.relative_to(ROOT)}: {fig}")
    assert not missing, "figures with no entry in benchmarks/RESULTS.md:\n" + "\n".join(missing)


def test_each_decision_is_a_page_of_its_own_linked_from_the_index_and_the_nav():
    """docs/decisions/ holds one page per decision (its why and its evidence); index.md only links them."""
    folder = DOCS / "decisions"
    index = (folder / "index.md").read_text()
    assert not re.search(r"^## ", index, re.M), "docs/decisions/index.md: put each decision on a page of its own"
    decisions = sorted(p.name for p in folder.glob("*.md") if p.name != "index.md")
    nav = (ROOT / "mkdocs.yml").read_text()
    unlisted = [name for name in decisions if f"({name})" not in index or f"decisions/{name}" not in nav]
    assert decisions and not unlisted, f"link these from docs/decisions/index.md and mkdocs.yml's nav: {unlisted}"


#: packages whose docstring is being rewritten by a branch in flight (issue 36); empty this set once merged
DOCSTRING_MAP_PENDING: set[str] = set()


def test_each_package_docstring_names_every_module_of_the_package():
    """A package's docstring is its map: each module and sub-package in it by name (the top-level
    package's map is CONTRIBUTING.md's)."""
    import ast

    stale = []
    for init in sorted((ROOT / "hybridload").rglob("__init__.py")):
        folder = init.parent
        where = str(folder.relative_to(ROOT))
        if folder == ROOT / "hybridload" or where in DOCSTRING_MAP_PENDING:
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        names = [p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
        names += [p.name for p in folder.iterdir() if (p / "__init__.py").exists()]
        missing = sorted(n for n in names if not re.search(rf"\b{re.escape(n)}\b", doc))
        if missing:
            stale.append(f"{where}/__init__.py: {missing}")
    assert not stale, "name these modules in their package's docstring:\n" + "\n".join(stale)


ROLE = re.compile(r":(?:class|mod|func|meth|attr|exc|data|obj|ref):(?:<code>|`)")


@pytest.mark.slow
def test_no_page_of_the_built_site_shows_a_sphinx_role(tmp_path):
    """The API pages render docstrings as Markdown (mkdocstrings, Google style): a reST role such as
    :class:`X` would show literally. Builds the site, strict, and reads every page. About 20-60 s."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    shown = {}
    for page in (tmp_path / "site").rglob("*.html"):
        for m in ROLE.finditer(page.read_text()):
            shown.setdefault(str(page.relative_to(tmp_path / "site")), []).append(m.group(0))
    assert not shown, f"raw reST roles on the site (write `name` instead): {shown}"


def stats_keys(d: dict, prefix: str = "") -> set[str]:
    """The keys of a ``stats()`` dict as the API page writes them: ``lanes.NAME.share``, ``plan.mode``."""
    keys = set()
    for key, value in d.items():
        name = f"{prefix}{key}"
        keys.add(name)
        if key in ("lanes", "actor_pools") and isinstance(value, dict):
            for sub in value.values():
                keys |= stats_keys(sub, f"{name}.NAME.")
        elif key in ("plan", "fallback") and isinstance(value, dict):
            keys |= stats_keys(value, f"{name}.")
    return keys


def test_stats_keys_names_nested_keys_as_the_api_page_does():
    assert stats_keys({"a": 1, "lanes": {"gpu": {"share": 1}}, "plan": {"mode": "auto"}}) == {
        "a",
        "lanes",
        "lanes.NAME.share",
        "plan",
        "plan.mode",
    }


def test_the_api_page_describes_every_key_of_both_loaders_stats(tmp_path):
    """A real HybridLoader (in-process lane) and drop-in DataLoader, plus the Ray pool's and the stand-by
    lanes' counters (built directly: no cluster needed for their keys)."""
    import torch

    from hybridload import DataLoader, HybridLoader, LoaderPolicy, recipe, sources
    from hybridload.cli.demo_data import make_photo_folder
    from hybridload.execution._stats import LoaderStats
    from hybridload.lanes._ray.pool_stats import PoolStats

    root = make_photo_folder(tmp_path / "photos", 8)
    policy = LoaderPolicy(mode="auto", cpu_actors=0, threads=1, plan=None)
    with HybridLoader(sources.ImageFolder(root), recipe.imagenet_train(32), 4, policy=policy) as loader:
        for _ in loader:
            pass
        hybrid = loader.stats()
    with DataLoader(torch.utils.data.TensorDataset(torch.arange(8)), batch_size=4) as dl:
        for _ in dl:
            pass
        dropin = dl.stats()
    hybrid["plan"]["replans"] = []  # present under mode="auto" with a GPU lane, which this machine lacks
    hybrid["actor_pools"] = {"ray": PoolStats().as_dict()}
    hybrid["fallback"] = dict(LoaderStats().lane_totals(["inprocess"]), without_actors_s=0.0)
    keys = stats_keys(hybrid) | stats_keys(dropin)
    table = (DOCS / "api" / "index.md").read_text().split("## stats()", 1)[1]
    written = set(re.findall(r"`([\w.]+(?:\.NAME)?[\w.]*)`", table))
    for row in re.findall(r"^\| (`actor_pools\.NAME\.[^|]*)\|", table, re.M):  # `a.NAME.x`, `.y`: siblings of x
        head = re.match(r"`(actor_pools\.NAME\.)", row).group(1)
        written |= {head + k for k in re.findall(r"`\.?(?:actor_pools\.NAME\.)?(\w+)`", row)}
    written |= {
        f"fallback.{k}"
        for k in ("lanes", "batches", "images", "busy_s", "without_actors_s")
        if f"`{k}`" in table.split("| `fallback` |", 1)[1].split("\n", 1)[0]
    }
    written |= {
        f"{a}" for row in re.findall(r"^\| (`rank`, `world_size`)", table, re.M) for a in ("rank", "world_size")
    }
    missing = sorted(keys - written)
    assert not missing, f"stats() keys not described on docs/api/index.md: {missing}"


def test_the_examples_page_names_the_flags_each_example_takes():
    """The page's first paragraph lists the examples taking --steps/--epochs/--batch-size (through
    examples/_common.py's parser); the Dpex ones are listed apart, with their own flags."""
    examples = ROOT / "examples"
    page = (DOCS / "guide" / "examples.md").read_text()
    common = (examples / "_common.py").read_text()
    assert all(f'"{flag}"' in common for flag in ("--steps", "--epochs", "--batch-size"))
    first = page.split("\n\n")[1]
    named = re.findall(r"`(\w+\.py)`", first)
    assert len(named) >= 5, first
    for script in named:
        assert re.search(r"from _common import .*\bparser\b", (examples / script).read_text()), script
    for script in ("dpex_single.py", "dpex_dataparallel.py", "dpex_ddp.py"):
        epochs = '"--epochs"' in (examples / script).read_text()
        said = re.search(rf"`{script}` also `--epochs", page) is not None
        assert epochs == said, f"{script}: takes --epochs: {epochs}; the examples page says so: {said}"
    assert set(named) | {"dpex_single.py", "dpex_dataparallel.py", "dpex_ddp.py"} >= {
        p.name for p in examples.glob("*.py") if not p.name.startswith("_")
    }, "an example the page does not place"


def test_every_hybridload_environment_variable_in_the_code_is_on_the_environment_page():
    code = "\n".join(p.read_text() for folder in ("hybridload", "examples") for p in (ROOT / folder).rglob("*.py"))
    used = set(re.findall(r"\bHYBRIDLOAD_[A-Z0-9_]*[A-Z0-9]\b", code))
    assert len(used) >= 4, used
    page = (DOCS / "reference" / "environment.md").read_text()
    missing = sorted(name for name in used if f"`{name}`" not in page)
    assert not missing, f"docs/reference/environment.md does not list {missing}"
    stale = sorted(set(re.findall(r"`(HYBRIDLOAD_\w+)`", page)) - used)
    assert not stale, f"docs/reference/environment.md lists variables the code no longer reads: {stale}"


def test_the_cli_page_lists_every_argument_of_every_command_with_its_default():
    import argparse

    from hybridload.cli._commands import build_parser

    page = (DOCS / "reference" / "cli.md").read_text()
    commands = build_parser()._subparsers._group_actions[0].choices
    assert set(commands) == set(re.findall(r"^## hybridload ([\w-]+)$", page, re.M))
    wrong = []
    for name, parser in commands.items():
        section = page.split(f"## hybridload {name}\n", 1)[1].split("\n## ", 1)[0]
        rows = {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `([^`]+)`[^|]*\| ([^|]*)\|", section, re.M)}
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            key = action.option_strings[0] if action.option_strings else action.metavar
            default = action.default
            want = (
                "required"
                if not action.option_strings
                else ("—" if default is None or default is False else f"`{default}`")
            )
            if rows.get(key) != want:
                wrong.append(f"hybridload {name} {key}: the page says {rows.get(key)!r}, the parser {want!r}")
    assert not wrong, "\n".join(wrong)


def test_the_site_and_the_changelog_name_the_version_pyproject_builds():
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert f"**hybridload {version}**" in (DOCS / "index.md").read_text()
    first = re.search(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M).group(1)
    assert first == version, f"CHANGELOG.md's latest entry is {first}, pyproject.toml builds {version}"


def test_the_architecture_picture_is_what_its_script_draws():
    import runpy

    script = runpy.run_path(str(DOCS / "figures" / "architecture.py"))
    assert (DOCS / "figures" / "architecture.svg").read_text() == script["svg"](), (
        "run python docs/figures/architecture.py and commit the SVG"
    )
    assert "figures/architecture.svg" in (DOCS / "index.md").read_text()


def test_every_file_a_page_links_to_is_in_the_repository():
    """A fresh clone builds the site: each image or file a page links to is tracked by git (an
    ignored figure exists only on the machine that drew it, and ``mkdocs build --strict`` fails
    on the clone)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = set(
        subprocess.run(["git", "ls-files", "docs"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    )
    missing = []
    for page in sorted(DOCS.rglob("*.md")):
        for target in re.findall(r"\]\(([^)\s#]+)", page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:") or target.endswith((".md", "/")):
                continue
            path = (page.parent / target).resolve()
            try:
                rel = str(path.relative_to(ROOT))
            except ValueError:
                continue
            if rel.startswith("docs/") and rel not in tracked:
                missing.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not missing, f"linked but not tracked by git (git add it, or un-ignore it): {missing}"
