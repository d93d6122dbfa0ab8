"""Errors hybridload raises to its users. Each names what the user needs to find the problem;
a signal passed only between the package's parts lives beside them (`Reroute`: `hybridload.lanes.base`).

Also the one shutdown routine, `close_all`, used by every floor that closes several
parts: it closes them all and reports every failure at the end (`ShutdownError`).

Modules: ``core`` (the error types) and ``shutdown`` (`close_all`, `take_all` and
`ShutdownError`). Every name is imported from here (``from hybridload.errors import X``).
"""

from hybridload.errors.core import (
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
from hybridload.errors.shutdown import ShutdownError, close_all, take_all

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

# the classes keep the path they are imported and pickled by (hybridload.errors.X), as before the split
for _name in __all__:
    if isinstance(_obj := globals()[_name], type):
        _obj.__module__ = __name__
