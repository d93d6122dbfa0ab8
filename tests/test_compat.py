"""The private Ray and torch APIs the package leans on live behind `hybridload._compat`: each one
it lists exists in the installed Ray and torch (an upgrade that moves one fails its own case
here), and no other module of the package reaches into a private Ray or torch name."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from hybridload import _compat as compat

REPO = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = ("hybridload",)


@pytest.mark.parametrize("api", compat.PRIVATE_APIS, ids=lambda a: f"{a.module}:{a.attribute}")
def test_each_private_api_the_package_uses_exists_in_the_installed_version(api):
    obj = importlib.import_module(api.module)
    for part in api.attribute.split("."):
        assert hasattr(obj, part), (
            f"{api.module}.{api.attribute} is gone from the installed version "
            f"(used for: {api.used_for}); mend hybridload/_compat"
        )
        obj = getattr(obj, part)


def _private(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] in ("ray", "torch") and any(p.startswith("_") and not p.startswith("__") for p in parts[1:])


def _dotted(node: ast.AST) -> str | None:
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(names)])
    return None


def private_uses(path: Path, root: Path = REPO) -> list[str]:
    """The private Ray or torch names ``path`` imports or reads (``ray._private...``,
    ``torch.utils.data._utils...``, ``from torch._utils import ...``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _private(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [f"{node.module}.{a.name}" for a in node.names if _private(f"{node.module}.{a.name}")]
        elif isinstance(node, ast.Attribute) and not isinstance(getattr(node, "ctx", None), ast.Del):
            dotted = _dotted(node)
            if dotted and _private(dotted):
                found.append(dotted)
    return [f"{path.relative_to(root)}:{name}" for name in found]


def test_no_module_outside_compat_uses_a_private_ray_or_torch_name():
    compat_dir = REPO / "hybridload" / "_compat"
    offenders = [
        use
        for d in PACKAGE_DIRS
        for path in sorted((REPO / d).rglob("*.py"))
        if compat_dir not in path.parents
        for use in private_uses(path)
    ]
    assert not offenders, "private Ray/torch names used outside hybridload/_compat:\n" + "\n".join(offenders)


def test_the_private_name_scan_sees_imports_and_attribute_reads(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import ray\nfrom torch.utils.data._utils import worker\nfrom ray._raylet import X\n"
        "import torch.utils.data._utils.fetch\nx = ray._private.state.jobs()\ny = torch.cuda.is_available()\n"
    )
    uses = [u.split(":", 1)[1] for u in private_uses(probe, tmp_path)]
    assert "torch.utils.data._utils.worker" in uses and "ray._raylet.X" in uses
    assert "torch.utils.data._utils.fetch" in uses and "ray._private.state.jobs" in uses
    assert not any(u.startswith("torch.cuda") for u in uses)
