"""hybridload: preprocessed, ordered, per-rank batches from DALI on the GPU and Ray CPU actors.

The public names load on first use (PEP 562), so ``import hybridload.cli`` answers
``hybridload --help`` without importing torch (3-12 s here); ``from hybridload import X`` works as
before."""

import importlib
import logging
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from hybridload.errors import BatchTimeoutError, HybridLoadError, LaneUnavailableError, SampleError, StorageError

logging.getLogger(__name__).addHandler(logging.NullHandler())

try:
    __version__ = version("hybridload")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0.0.0+unknown"

#: public name -> (module, attribute; None: the module itself)
_LAZY = {"HybridLoader": ("hybridload.loader", "HybridLoader"), "DataLoader": ("hybridload.dataloader", "DataLoader"),
         "LoaderPolicy": ("hybridload.policy", "LoaderPolicy"), "Plan": ("hybridload.planner", "Plan"),
         "PlanFormatError": ("hybridload.planner", "PlanFormatError"), "recipe": ("hybridload.recipe", None),
         "sources": ("hybridload.sources", None), "sharding": ("hybridload.sampling.sharding", None)}

if TYPE_CHECKING:  # what type checkers and the API reference see
    from hybridload import recipe, sources
    from hybridload.dataloader import DataLoader
    from hybridload.loader import HybridLoader
    from hybridload.planner import Plan, PlanFormatError
    from hybridload.policy import LoaderPolicy
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


__all__ = ["HybridLoader", "DataLoader", "LoaderPolicy", "Plan", "PlanFormatError", "recipe", "sources",
           "sharding", "SampleError", "StorageError", "BatchTimeoutError", "HybridLoadError", "LaneUnavailableError",
           "__version__"]
