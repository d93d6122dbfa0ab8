"""Local lanes: the CPU kernels on this machine without Ray (how they behave:
docs/guide/concepts.md, "The local lanes").

Modules: ``inprocess`` (threads in the trainer, writing into kept buffers), ``process`` (forked
worker processes writing into shared-memory slots) and ``process_worker`` (a worker's start, with a
task queue and results pipe of its own, and its loop)."""

from hybridload.lanes._local.inprocess import InProcessLane
from hybridload.lanes._local.process import ProcessLane

__all__ = ["InProcessLane", "ProcessLane"]
