"""Optional dependencies: a missing one is a one-line message naming what to install.

hybridload is installed from a clone, a git URL or a wheel (it is not on PyPI), so a message
names the packages an extra brings (read from the installed metadata, pyproject.toml's one
list), not ``pip install 'hybridload[extra]'``, which pip would look for on PyPI."""

from __future__ import annotations

import importlib
import re
from importlib.metadata import PackageNotFoundError, requires
from types import ModuleType

from hybridload.errors import HybridLoadError


class MissingExtraError(HybridLoadError, ImportError):
    """An optional dependency is not installed; the message says which extra brings it.

    An ``ImportError`` too, so ``except ImportError`` around an optional import still catches it."""


def install_hint(extra: str, fallback: str = "") -> str:
    """``pip install '<requirements of the extra>' (hybridload's [extra] extra)``, the requirements
    as the installed metadata lists them (another extra they name, expanded), else ``fallback``."""
    try:
        lines = requires("hybridload") or []
    except PackageNotFoundError:
        lines = []

    def of(name: str, depth: int = 0) -> list[str]:
        out = []
        for line in lines:
            req, _, marker = line.partition(";")
            if re.search(rf"""extra\s*==\s*["']{re.escape(name)}["']""", marker):
                inner = re.fullmatch(r"\s*hybridload\[([\w,-]+)\]\s*", req)
                out += (
                    [r for e in inner.group(1).split(",") for r in of(e, depth + 1)]
                    if inner and depth < 3
                    else [req.strip().replace(" ", "")]
                )
        return out

    reqs = of(extra) or ([fallback] if fallback else [])
    return (
        f"pip install {' '.join(repr(r) for r in reqs)} (hybridload's [{extra}] extra)"
        if reqs
        else f"install hybridload with its [{extra}] extra"
    )


def require(module: str, extra: str, purpose: str, package: str | None = None) -> ModuleType:
    """Import ``module`` or raise MissingExtraError: "<purpose> needs <package>, which is not
    installed: pip install '<the extra's requirements>' (hybridload's [<extra>] extra)"."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        name = package or module.split(".")[0]
        raise MissingExtraError(f"{purpose} needs {name}, which is not installed: {install_hint(extra, name)}") from exc
