"""The policy, and the one place it is decoded: ``loader_policy`` (`LoaderPolicy`, what the user
writes), ``decode`` (pure: a policy and a plan into a `LaneSpec` and the knobs' options objects)
and ``facts`` (this process's facts the decoding is given).
"""

from hybridload.lanes._ray.capacity import ON_NO_ACTORS
from hybridload.lanes._spec import ON_ERROR
from hybridload._policy.facts import usable_cpus
from hybridload._policy.loader_policy import (
    GPU_ENGINES,
    LOCAL_WORKERS,
    MODES,
    START_METHODS,
    LoaderPolicy,
    is_ray_address,
)
from hybridload.raycluster._placement import PLACEMENTS

__all__ = [
    "GPU_ENGINES",
    "LOCAL_WORKERS",
    "MODES",
    "ON_ERROR",
    "ON_NO_ACTORS",
    "PLACEMENTS",
    "START_METHODS",
    "LoaderPolicy",
    "is_ray_address",
    "usable_cpus",
]
