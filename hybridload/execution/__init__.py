"""Execution: one pass over a rank's batches (how it runs: docs/guide/concepts.md, "How a pass
runs").

Modules: ``_stream`` (`BatchStream`: dispatcher + merger + close), ``_pass_iter`` (a pass's results
delivered), ``_pass_config`` (`PassConfig`), ``_tasks`` (tasks made when reached), ``_dispatch`` (hands
tasks to lanes), ``_picking`` (which lane takes a task), ``_books`` (the bookkeeping per lane),
``_stragglers`` (when a running task is issued again), ``_admission`` (`ShareAdmission`: the lane
shares), ``_hooks`` (what the dispatcher reports), ``_merge`` (in order, exactly once), ``_retry`` (the
pure retry decision), ``_stats`` (the counters and ``stats()``'s report), ``_trace``
(``loader.trace(path)``'s timeline, the profiler's ranges) and ``_scalars`` (``stats()`` as
TensorBoard scalars: `StatsWriter`)."""

from hybridload.execution._admission import ShareAdmission
from hybridload.execution._pass_config import PassConfig
from hybridload.execution._stats import LoaderStats
from hybridload.execution._stream import BatchStream
from hybridload.execution._tasks import sampler_tasks
from hybridload.execution._trace import Tracer, recording

__all__ = ["BatchStream", "LoaderStats", "PassConfig", "ShareAdmission", "Tracer", "recording", "sampler_tasks"]
