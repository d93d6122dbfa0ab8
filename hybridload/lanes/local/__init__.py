"""Local lanes: the CPU kernels on this machine, no Ray.

``inprocess`` (a thread pool in the trainer) and ``process`` (forked worker processes
writing into shared-memory slots; ``process_worker`` is the loop each worker runs).
"""

from hybridload.lanes.local.inprocess import InProcessLane
from hybridload.lanes.local.process import ProcessLane

__all__ = ["InProcessLane", "ProcessLane"]
