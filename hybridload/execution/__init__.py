"""Execution: one pass over a rank's batches.

``stream`` (BatchStream: dispatcher + merger + close), ``dispatch`` (hands tasks to lanes),
``hooks`` (what the dispatcher calls on its thread: stats, the caps hook), ``merge`` (releases
batches in order, exactly once), ``tasks`` (the caller's batch tasks, drawn from a sampler as
the window reaches them), ``retry`` (the pure retry decision) and ``stats`` (the
loader's counters, written through the dispatcher's hooks).
"""

from hybridload.execution.stats import LoaderStats
from hybridload.execution.stream import BatchStream
from hybridload.execution.tasks import sampler_tasks

__all__ = ["BatchStream", "LoaderStats", "sampler_tasks"]
