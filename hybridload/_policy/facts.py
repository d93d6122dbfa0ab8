"""This process's facts a policy is decoded with, read here so the decoding stays pure."""

from __future__ import annotations

import importlib.util
import os

from hybridload.planner._fit import Here
from hybridload import _environment as environment, raycluster


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def ray_installed() -> bool:
    """Whether Ray imports here (without importing it)."""
    return importlib.util.find_spec("ray") is not None


def dali_installed() -> bool:
    """Whether NVIDIA DALI is installed here (without importing it, which takes seconds)."""
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except (ImportError, ValueError):  # no ``nvidia`` package, or a module made unimportable
        return False


def ray_address_env() -> str | None:
    """The RAY_ADDRESS environment variable."""
    return environment.text("RAY_ADDRESS")


def here(overrides: dict) -> Here:
    """This process's GPU, CPUs and Ray cluster as far as known, for fitting a plan under the
    ``from_plan`` ``overrides``."""
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    address = overrides.get("ray_address", ray_address_env())
    reserve = overrides.get("reserve_local_cpus", 1)
    cluster = raycluster.joined() if address is not None else None  # asks only a cluster joined already
    if cluster is not None:
        nodes, cpus = cluster
        return Here(gpu, usable_cpus(), ray=True, node_ids=nodes, actor_slots=max(1, cpus - reserve))
    slots = max(1, (os.cpu_count() or 1) - reserve) if address == "embedded" else None
    return Here(gpu, usable_cpus(), ray=address is not None, actor_slots=slots)
