"""hybridload: preprocessed, ordered, per-rank batches from DALI on the GPU and Ray CPU actors.

The command line (``hybridload ...``) loads the public names on first use (PEP 562), so that
``hybridload --help`` answers without importing torch (3-12 s on the build machines). Any other
process loads them at ``import hybridload``: a wrapper applied later to torch's DataLoader and its
subclasses must find hybridload's (Lightning records each DataLoader's arguments that way, to
build it again with its DistributedSampler; a class defined after it wrapped them keeps torch's
arguments instead)."""

import importlib
import logging
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from hybridload.errors import BatchTimeoutError, HybridLoadError, LaneUnavailableError, SampleError, StorageError

logging.getLogger(__name__).addHandler(logging.NullHandler())

try:
    __version__ = version("hybridload")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0.0.0+unknown"

#: public name -> (module, attribute; None: the module itself)
_LAZY = {
    "HybridLoader": ("hybridload._loader", "HybridLoader"),
    "DataLoader": ("hybridload._dataloader", "DataLoader"),
    "LoaderPolicy": ("hybridload._policy", "LoaderPolicy"),
    "Plan": ("hybridload.planner", "Plan"),
    "PlanFormatError": ("hybridload.planner", "PlanFormatError"),
    "recipe": ("hybridload.recipe", None),
    "sources": ("hybridload.sources", None),
    "sharding": ("hybridload.sampling.sharding", None),
    "StatsWriter": ("hybridload.execution._scalars", "StatsWriter"),
    "loader_scalars": ("hybridload.execution._scalars", "loader_scalars"),
}

if TYPE_CHECKING:  # what type checkers and the API reference see
    from hybridload import recipe, sources
    from hybridload._dataloader import DataLoader
    from hybridload.execution._scalars import StatsWriter, loader_scalars
    from hybridload._loader import HybridLoader
    from hybridload.planner import Plan, PlanFormatError
    from hybridload._policy import LoaderPolicy
    from hybridload.sampling import sharding


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'hybridload' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    value = value if attr is None else getattr(value, attr)
    globals()[name] = value  # once: later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "HybridLoader",
    "DataLoader",
    "LoaderPolicy",
    "Plan",
    "PlanFormatError",
    "recipe",
    "sources",
    "sharding",
    "StatsWriter",
    "loader_scalars",
    "SampleError",
    "StorageError",
    "BatchTimeoutError",
    "HybridLoadError",
    "LaneUnavailableError",
    "__version__",
]


#: the process is the ``hybridload`` command (its console script), which needs no torch to parse
COMMAND_LINE = os.path.basename(getattr(sys, "argv", [""])[0] or "") == "hybridload"
if not COMMAND_LINE:
    for _name in _LAZY:
        __getattr__(_name)
    del _name
