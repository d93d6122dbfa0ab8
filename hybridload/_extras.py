"""Optional dependencies: a missing one is a one-line message naming the packages its extra brings,
from the installed metadata, since ``pip install 'hybridload[extra]'`` would look on PyPI, where
hybridload is not (docs/decisions/not-on-pypi.md)."""

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
    """``pip install '<requirements of the extra>' (hybridload's [extra] extra)`` from the installed
    metadata, else ``fallback``."""
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
