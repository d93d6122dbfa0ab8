"""The private Ray and torch APIs hybridload leans on, in one place: each reached through a
function here, imported when called, and listed in `PRIVATE_APIS` so ``tests/test_compat.py``
fails by name when an upgrade moves one, instead of a lane at run time.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, NamedTuple


class PrivateApi(NamedTuple):
    """One private name: ``module`` imported, then ``attribute`` (dotted) read on it."""

    module: str
    attribute: str
    used_for: str


#: Every private Ray and torch name the package uses (tests/test_compat.py imports each).
PRIVATE_APIS = (
    PrivateApi("ray._private.state", "state.get_draining_nodes", "the elastic pool sees drained nodes"),
    PrivateApi("ray._private.state", "jobs", "the embedded cluster's owner waits for the ranks that joined it"),
    PrivateApi("ray._private.worker", "_global_node", "a dead worker's signal, read from this node's logs"),
    PrivateApi("ray._private.node", "Node.get_logs_dir_path", "a dead worker's signal, read from this node's logs"),
    PrivateApi("ray._private.worker", "global_worker", "whether ray.init() made the cluster"),
    PrivateApi("ray._common.usage.usage_lib", "get_cluster_metadata", "whether ray.init() made the cluster"),
    PrivateApi(
        "ray._private.authentication.authentication_token_setup",
        "maybe_enable_token_auth_if_token_available",
        "joining a cluster with Ray's token",
    ),
    PrivateApi("ray._private.services", "resolve_ip_for_localhost", "joining a loopback-only cluster"),
    PrivateApi("ray._private.services", "is_localhost", "joining a loopback-only cluster"),
    PrivateApi("ray._private.ray_constants", "ENABLE_RAY_CLUSTER", "the embedded cluster listens on 127.0.0.1 only"),
    PrivateApi("ray._raylet", "InnerGcsClient.standalone", "asking a GCS before ray.init, bounded"),
    PrivateApi("ray._common.utils", "get_ray_address_file", "finding a cluster `ray start` made"),
    PrivateApi("torch._utils", "KeyErrorMessage", "a dataset's KeyError re-raised readable, as torch does"),
    PrivateApi("torch.utils.data._utils.worker", "WorkerInfo", "get_worker_info() inside a Ray actor"),
    PrivateApi("torch.utils.data._utils.worker", "_worker_info", "get_worker_info() inside a Ray actor"),
    PrivateApi("torch.utils.data._utils.worker", "_generate_state", "numpy's seed in an IterableDataset worker"),
    PrivateApi("torch.utils.data._utils.fetch", "_IterableDatasetFetcher", "an IterableDataset's batches"),
    PrivateApi("torch.utils.data._utils.pin_memory", "pin_memory", "the drop-in's pin_memory=True"),
    PrivateApi("torch.autograd.profiler", "_is_profiler_enabled", "record_function ranges only while torch profiles"),
    PrivateApi("torch._C._nn", "_upsample_bilinear2d_aa", "the CPU kernels' resize into a kept buffer"),
)

#: The logger of Ray's token set-up (its banner is noise for a loopback cluster this process owns).
RAY_TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"


# ------------------------------------------------------------------ Ray
def ray_draining_nodes() -> set:
    """The ids of the nodes Ray is draining (Ray's own reader of the GCS drain list)."""
    from ray._private.state import state

    return set(state.get_draining_nodes())


def ray_jobs() -> list:
    """Ray's job table (every driver that connected to this cluster)."""
    from ray._private import state

    return state.jobs()


def ray_node_logs_dir() -> str:
    """This process's Ray node's log directory, read without a call to Ray."""
    from ray._private import worker

    node = worker._global_node
    if node is None:
        raise RuntimeError("this process has no Ray node (ray.init() has not run)")
    return node.get_logs_dir_path()


def ray_cluster_metadata() -> dict | None:
    """The cluster metadata Ray records at start (``ray_init_cluster``: made by ``ray.init()``)."""
    from ray._common.usage.usage_lib import get_cluster_metadata
    from ray._private import worker

    return get_cluster_metadata(worker.global_worker.gcs_client)  # type: ignore[attr-defined]  # set on connect


def ray_enable_token_auth() -> None:
    """Use Ray's token, if this machine has one, as ``ray.init("auto")`` does."""
    from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available

    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


@contextlib.contextmanager
def ray_localhost_kept() -> Iterator[None]:
    """Within the block, ``ray.init(address=...)`` keeps a loopback host rather than this machine's
    outward address, where a loopback-only cluster does not listen (the join would retry forever)."""
    from ray._private import services

    real = services.resolve_ip_for_localhost
    services.resolve_ip_for_localhost = lambda host: host if services.is_localhost(host) else real(host)
    try:
        yield
    finally:
        services.resolve_ip_for_localhost = real


def ray_disable_cluster_mode() -> None:
    """Correct Ray's ``ENABLE_RAY_CLUSTER`` (read once when ``ray`` is imported) to False."""
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def ray_gcs_client_probe(address: str, timeout_ms: int) -> None:
    """Raise unless the GCS at ``address`` gives its cluster id within ``timeout_ms``."""
    from ray._raylet import InnerGcsClient  # type: ignore[attr-defined]  # a Cython class _raylet.pyi omits

    InnerGcsClient.standalone(address, None, timeout_ms)


def ray_address_file() -> str:
    """The path of the address file ``ray start`` writes."""
    from ray._common.utils import get_ray_address_file

    return get_ray_address_file(None)


# ------------------------------------------------------------------ torch
def torch_key_error(msg: str) -> KeyError:
    """A KeyError whose message prints as written (torch's ``KeyErrorMessage``)."""
    from torch._utils import KeyErrorMessage

    return KeyError(KeyErrorMessage(msg))


def set_torch_worker_info(worker_id: int, num_workers: int, seed: int, dataset: Any) -> None:
    """What ``torch.utils.data.get_worker_info()`` returns in this process from now on."""
    from torch.utils.data._utils import worker

    worker._worker_info = worker.WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)


def torch_worker_info() -> Any:
    """What ``torch.utils.data.get_worker_info()`` returns in this process now (None outside a worker)."""
    from torch.utils.data._utils import worker

    return worker._worker_info


def restore_torch_worker_info(info: Any) -> None:
    """Put back a worker info read by `torch_worker_info` (None: this process is no worker)."""
    from torch.utils.data._utils import worker

    worker._worker_info = info


def torch_worker_numpy_seed(base_seed: int, worker_id: int) -> Any:
    """The numpy seed torch's DataLoader gives worker ``worker_id`` of a pass seeded ``base_seed``."""
    from torch.utils.data._utils import worker

    return worker._generate_state(base_seed, worker_id)


def torch_iterable_fetcher(dataset: Any, auto_collation: bool, collate_fn: Any, drop_last: bool) -> Any:
    """torch's own fetcher of an IterableDataset's batches (``fetch(indices)``)."""
    from torch.utils.data._utils import fetch

    return fetch._IterableDatasetFetcher(dataset, auto_collation, collate_fn, drop_last)


def torch_resize_aa() -> Any:
    """``F.interpolate(mode="bilinear", antialias=True)``'s own kernel, which takes ``out=``
    (the call: ``(nchw, (h, w), align_corners, None, None, out=...)``)."""
    import torch

    return torch._C._nn._upsample_bilinear2d_aa


def torch_pin_memory(data: Any, device: Any) -> Any:
    """torch DataLoader's ``pin_memory`` of a batch (tensors in any nesting)."""
    from torch.utils.data._utils.pin_memory import pin_memory

    return pin_memory(data, device)


__all__ = [
    "PRIVATE_APIS",
    "PrivateApi",
    "RAY_TOKEN_LOGGER",
    "ray_draining_nodes",
    "ray_jobs",
    "ray_node_logs_dir",
    "ray_cluster_metadata",
    "ray_enable_token_auth",
    "ray_localhost_kept",
    "ray_disable_cluster_mode",
    "ray_gcs_client_probe",
    "ray_address_file",
    "torch_key_error",
    "set_torch_worker_info",
    "torch_worker_info",
    "restore_torch_worker_info",
    "torch_worker_numpy_seed",
    "torch_iterable_fetcher",
    "torch_pin_memory",
    "torch_resize_aa",
]


def torch_profiler_on() -> bool:
    """Whether torch's profiler records now (a flag read: a ``record_function`` costs microseconds
    when nobody records)."""
    from torch.autograd import profiler

    return bool(profiler._is_profiler_enabled)
