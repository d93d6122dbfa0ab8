"""A simulated 3-node Ray cluster on loopback (head = the trainer's node, plus 2 workers)."""

from __future__ import annotations

import contextlib
import os

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback only; before Ray starts
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
# Ray workers inherit this process's environment: let them import classes defined in test
# modules and in support/ (test sources, datasets, the slowmem:// filesystem, actor classes
# pickled to actors), whatever directory pytest runs from.
_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/, above support/
if _TESTS not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_TESTS, os.environ.get("PYTHONPATH")) if p)

STORE = 150 * 1024 * 1024


@contextlib.contextmanager
def three_node_cluster(head_cpus: int = 2, worker_cpus: int = 1):
    import ray
    from ray.cluster_utils import Cluster

    from hybridload.raycluster import _connect as hl_cluster

    hl_cluster.shutdown()  # an idle connection an earlier loader of this process kept (one per process)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": head_cpus,
            "include_dashboard": False,
            "object_store_memory": STORE,
            "node_ip_address": "127.0.0.1",
            "resources": {"trainer_node": 1},
        },
    )
    try:
        workers = [
            cluster.add_node(num_cpus=worker_cpus, object_store_memory=STORE, node_ip_address="127.0.0.1")
            for _ in range(2)
        ]
        cluster.wait_for_nodes(timeout=60)
        ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
        try:
            nodes = [n for n in ray.nodes() if n["Alive"]]
            assert len(nodes) == 3
            assert all(n["NodeManagerAddress"] == "127.0.0.1" for n in nodes), "Ray left loopback"
            yield cluster, workers
        finally:
            ray.shutdown()
    finally:
        cluster.shutdown()


def alive_actors() -> list[str]:
    """Names of the hybridload actors alive in the cluster (Ray's GCS, all namespaces)."""
    import ray

    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("hybridload-")]
