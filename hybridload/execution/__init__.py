"""Execution: one pass over a rank's batches.

``stream`` (BatchStream: dispatcher + merger + close), ``tasks`` (a pass's tasks, made when
the dispatcher reaches them), ``dispatch`` (hands tasks to lanes), ``books`` (its bookkeeping
for each lane), ``stragglers`` (when a running task is looked at again and re-issued),
``hooks`` (what the dispatcher calls on its thread: stats, the caps hook), ``merge`` (releases
batches in order, exactly once), ``retry`` (the pure retry decision) and ``stats`` (the
loader's counters, written through the dispatcher's hooks).
"""

from hybridload.execution.stats import LoaderStats
from hybridload.execution.stream import BatchStream

__all__ = ["BatchStream", "LoaderStats"]
