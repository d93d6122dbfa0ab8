"""Lanes: the engines that turn batch tasks into batch results.

A lane is small: ``name``, ``slots`` (tasks it runs at once), ``submit(task, done)``
(non-blocking; ``done(task, result_or_exception)`` is called exactly once, from any
thread) and ``close()``.
"""

from hybridload.lanes.base import BatchTask, Lane
from hybridload.lanes.local.inprocess import InProcessLane

__all__ = ["BatchTask", "Lane", "InProcessLane"]
