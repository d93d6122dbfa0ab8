"""Errors hybridload raises to its users, each naming what finds the problem, and `close_all`, the
one shutdown routine of every floor that closes several parts.

Modules: ``_core`` (the error types) and ``_shutdown`` (`close_all`, `take_all`, `ShutdownError`);
every name is imported from here.
"""

from hybridload.errors._core import (
    BatchTimeoutError,
    HybridLoadError,
    LabelError,
    LaneUnavailableError,
    ManifestError,
    NoActorsError,
    NoLaneError,
    OrderMismatchError,
    ResumeMismatchError,
    SampleError,
    ShardIndexError,
    StorageError,
    UserCodeError,
    WorkerLost,
)
from hybridload.errors._shutdown import ShutdownError, close_all, take_all

__all__ = [
    "BatchTimeoutError",
    "HybridLoadError",
    "LabelError",
    "LaneUnavailableError",
    "ManifestError",
    "NoActorsError",
    "NoLaneError",
    "OrderMismatchError",
    "ResumeMismatchError",
    "SampleError",
    "ShardIndexError",
    "ShutdownError",
    "StorageError",
    "UserCodeError",
    "WorkerLost",
    "close_all",
    "take_all",
]

# the classes keep the path they are imported and pickled by (hybridload.errors.X)
for _name in __all__:
    if isinstance(_obj := globals()[_name], type):
        _obj.__module__ = __name__
