"""Execution: one pass over a rank's batches (how it runs: docs/guide/concepts.md, "How a pass
runs").

Modules: ``stream`` (`BatchStream`: dispatcher + merger + close), ``pass_iter`` (a pass's results
delivered), ``pass_config`` (`PassConfig`), ``tasks`` (tasks made when reached), ``dispatch`` (hands
tasks to lanes), ``picking`` (which lane takes a task), ``books`` (the bookkeeping per lane),
``stragglers`` (when a running task is issued again), ``admission`` (`ShareAdmission`: the lane
shares), ``hooks`` (what the dispatcher reports), ``merge`` (in order, exactly once), ``retry`` (the
pure retry decision), ``stats`` (the counters and ``stats()``'s report), ``trace``
(``loader.trace(path)``'s timeline, the profiler's ranges) and ``scalars`` (``stats()`` as
TensorBoard scalars: `StatsWriter`)."""

from hybridload.execution.admission import ShareAdmission
from hybridload.execution.pass_config import PassConfig
from hybridload.execution.stats import LoaderStats
from hybridload.execution.stream import BatchStream
from hybridload.execution.tasks import sampler_tasks
from hybridload.execution.trace import Tracer, recording

__all__ = ["BatchStream", "LoaderStats", "PassConfig", "ShareAdmission", "Tracer", "recording", "sampler_tasks"]
