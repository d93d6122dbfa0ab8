"""Execution: one pass over a rank's batches.

``stream`` (BatchStream: dispatcher + merger + close), ``pass_iter`` (PassIterator: a pass's
results delivered, keyed by its epoch and seed), ``pass_config`` (PassConfig: a pass's
settings), ``tasks`` (a pass's tasks, made when the dispatcher reaches them), ``dispatch``
(hands tasks to lanes), ``picking`` (which lane takes a task), ``books`` (its bookkeeping for
each lane), ``stragglers`` (when a running task is looked at again and re-issued),
``admission`` (ShareAdmission: which lane may take a new batch, the lane shares the online
planner steers), ``hooks`` (what the dispatcher reports on its thread), ``merge`` (releases
batches in order, exactly once), ``retry`` (the pure retry decision), ``stats`` (the
loader's counters, written through the dispatcher's hooks, and ``stats()``'s report) and
``trace`` (``loader.trace(path)``'s timeline of the loader's work, as trace-event JSON, and the
trainer-side ranges torch's profiler shows) and ``scalars`` (``stats()`` as TensorBoard
scalars every N steps: `StatsWriter`).
"""

from hybridload.execution.admission import ShareAdmission
from hybridload.execution.pass_config import PassConfig
from hybridload.execution.stats import LoaderStats
from hybridload.execution.stream import BatchStream
from hybridload.execution.tasks import sampler_tasks
from hybridload.execution.trace import Tracer, recording

__all__ = ["BatchStream", "LoaderStats", "PassConfig", "ShareAdmission", "Tracer", "recording", "sampler_tasks"]
