"""Local lanes: the CPU kernels on this machine, no Ray.

``inprocess`` (a thread pool in the trainer, writing into the kept buffers of
``lanes.batch_buffers``) and ``process`` (forked worker processes
writing into shared-memory slots; ``process_worker`` starts each worker, with a task queue and
a results pipe of its own, and is the loop it runs).
"""

from hybridload.lanes.local.inprocess import InProcessLane
from hybridload.lanes.local.process import ProcessLane

__all__ = ["InProcessLane", "ProcessLane"]
