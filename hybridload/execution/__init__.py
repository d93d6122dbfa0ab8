"""Execution: one pass over a rank's batches.

``stream`` (BatchStream: dispatcher + merger + close), ``dispatch`` (hands tasks to lanes),
``hooks`` (what the dispatcher calls on its thread: stats, the caps hook), ``merge`` (releases
batches in order, exactly once), ``retry`` (the pure retry decision) and ``stats`` (the
loader's counters, written through the dispatcher's hooks).
"""

from hybridload.execution.stats import LoaderStats
from hybridload.execution.stream import BatchStream

__all__ = ["BatchStream", "LoaderStats"]
