"""hybridload: preprocessed, ordered, per-rank batches from DALI on the GPU and Ray CPU actors."""

import logging
from importlib.metadata import PackageNotFoundError, version

from hybridload import recipe, sources
from hybridload.sampling import sharding
from hybridload.dataloader import DataLoader
from hybridload.errors import BatchTimeoutError, HybridLoadError, LaneUnavailableError, SampleError, StorageError
from hybridload.loader import HybridLoader
from hybridload.planner import Plan, PlanFormatError
from hybridload.policy import LoaderPolicy

logging.getLogger(__name__).addHandler(logging.NullHandler())

try:
    __version__ = version("hybridload")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["HybridLoader", "DataLoader", "LoaderPolicy", "Plan", "PlanFormatError", "recipe", "sources",
           "sharding", "SampleError", "StorageError", "BatchTimeoutError", "HybridLoadError", "LaneUnavailableError",
           "__version__"]
