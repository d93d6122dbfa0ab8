"""hybridload: preprocessed, ordered, per-rank batches from DALI on the GPU and Ray CPU actors."""

import logging

from . import recipe, sharding, sources
from .dataloader import DataLoader
from .errors import BatchTimeoutError, HybridLoadError, LaneUnavailableError, SampleError
from .loader import HybridLoader
from .policy import LoaderPolicy

logging.getLogger(__name__).addHandler(logging.NullHandler())

__version__ = "0.1.0"

__all__ = ["HybridLoader", "DataLoader", "LoaderPolicy", "recipe", "sources", "sharding", "SampleError",
           "BatchTimeoutError", "HybridLoadError", "LaneUnavailableError", "__version__"]
