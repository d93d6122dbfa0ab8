"""Lanes: the engines that turn batch tasks into batch results.

A lane is small: ``name``, ``slots`` (tasks it runs at once), ``submit(task, done)``
(non-blocking; ``done(task, result_or_exception)`` is called exactly once, from any
thread) and ``close()``.
"""

from .base import BatchTask, Lane
from .inprocess import InProcessLane

__all__ = ["BatchTask", "Lane", "InProcessLane"]
