"""The Ray adapter: every call that connects to, starts or asks a Ray cluster, and where actors go.

``_connect`` (one connection per process: an address, or the embedded local cluster),
``_ray_start`` (starting an embedded head), ``_node_cluster`` (one embedded cluster per
machine, shared by its ranks), ``_last_out`` (the rank that started it leaves it last),
``_agent_guard`` (Ray's node agents of the embedded cluster end with its raylet, even under a
SIGKILLed trainer), ``_gcs_probe`` (whether a cluster answers at an address, within a deadline),
``_shipping``
(user code the workers cannot import travels by value), ``_placement`` (which nodes the
actors go to) and ``_resources`` (what the cluster this process joined holds: nodes, free CPUs).
"""

from hybridload.raycluster._connect import NodeInfo, acquire, nodes, release, shutdown
from hybridload.raycluster._resources import free_cpus, joined
from hybridload.raycluster._placement import PlacementRules

__all__ = ["NodeInfo", "PlacementRules", "acquire", "free_cpus", "joined", "nodes", "release", "shutdown"]
