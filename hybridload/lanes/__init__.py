"""Lanes: the engines that turn batch tasks into batch results.

A lane is small: ``name``, ``slots`` (tasks it runs at once), ``submit(task, done)``
(non-blocking; ``done(task, result_or_exception)`` is called exactly once, from any
thread) and ``close()``.

``base`` (the contract, the `Lane` template and the batch task), ``spec`` (which lanes a
loader runs, as data), ``build`` (building them), ``cpu_job`` (the CPU lanes' batch job, the planner's probe's too), ``once`` (what they say about this machine, said once per process), ``batch_buffers`` (the kept buffers the
local and Ray lanes deliver batches in), and one sub-package per kind: ``local``
(the CPU kernels on this machine), ``ray`` (CPU actors on a Ray cluster) and ``gpu`` (the DALI
and torch engines).
"""

from hybridload.lanes.base import BatchTask, Lane
from hybridload.lanes.local.inprocess import InProcessLane

__all__ = ["BatchTask", "Lane", "InProcessLane"]
