"""Optional dependencies: a missing one is a one-line message naming the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from hybridload.errors import HybridLoadError


class MissingExtraError(HybridLoadError, ImportError):
    """An optional dependency is not installed; the message says which extra brings it.

    An ``ImportError`` too, so ``except ImportError`` around an optional import still catches it."""


def require(module: str, extra: str, purpose: str, package: str | None = None) -> ModuleType:
    """Import ``module`` or raise MissingExtraError: "<purpose> needs <package>: pip install 'hybridload[<extra>]'"."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(f"{purpose} needs {package or module.split('.')[0]}, which is not installed: "
                                f"pip install 'hybridload[{extra}]'") from exc
