"""hybridload: preprocessed, ordered, per-rank batches from DALI on the GPU and Ray CPU actors."""

import logging
from importlib.metadata import PackageNotFoundError, version

from . import recipe, sharding, sources
from .dataloader import DataLoader
from .errors import BatchTimeoutError, HybridLoadError, LaneUnavailableError, SampleError
from .loader import HybridLoader
from .planner import Plan, PlanFormatError
from .policy import LoaderPolicy

logging.getLogger(__name__).addHandler(logging.NullHandler())

try:
    __version__ = version("hybridload")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["HybridLoader", "DataLoader", "LoaderPolicy", "Plan", "PlanFormatError", "recipe", "sources",
           "sharding", "SampleError", "BatchTimeoutError", "HybridLoadError", "LaneUnavailableError",
           "__version__"]
