"""Readings the stress tools, the soak and the memory tests share: this process's resident set and
open file descriptors (Linux ``/proc``), and the Ray object store's use."""

import os


def rss_kib() -> int:
    """This process's resident set in KiB."""
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/status has no VmRSS line")


def rss_mb() -> float:
    """This process's resident set in MiB."""
    return rss_kib() / 1024


def fd_count() -> int:
    """This process's open file descriptors."""
    return len(os.listdir("/proc/self/fd"))


def store_used_mb() -> float:
    """Plasma MiB in use across this driver's Ray cluster (Ray's memory summary; needs grpcio),
    named by its GCS address: without one, Ray's own discovery may pick, or refuse beside, another
    Ray instance on the machine."""
    import ray
    from ray._private.internal_api import memory_summary

    text = memory_summary(address=ray.get_runtime_context().gcs_address, stats_only=True)
    for line in text.splitlines():
        if "Plasma memory usage" in line:
            return float(line.split("Plasma memory usage")[1].split("MiB")[0])
    return 0.0
