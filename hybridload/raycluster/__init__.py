"""The Ray adapter: every call that connects to, starts or asks a Ray cluster, and where actors go.

``connect`` (one connection per process: an address, or the embedded local cluster),
``ray_start`` (starting an embedded head), ``node_cluster`` (one embedded cluster per
machine, shared by its ranks), ``last_out`` (the rank that started it leaves it last),
``agent_guard`` (Ray's node agents of the embedded cluster end with its raylet, even under a
SIGKILLed trainer), ``gcs_probe`` (whether a cluster answers at an address, within a deadline),
``shipping``
(user code the workers cannot import travels by value), ``placement`` (which nodes the
actors go to) and ``resources`` (what the cluster this process joined holds: nodes, free CPUs).
"""

from hybridload.raycluster.connect import NodeInfo, acquire, nodes, release
from hybridload.raycluster.resources import free_cpus, joined
from hybridload.raycluster.placement import PlacementRules

__all__ = ["NodeInfo", "PlacementRules", "acquire", "free_cpus", "joined", "nodes", "release"]
