"""The environment variables hybridload reads, each read here, so a bad value is one ``ValueError``
naming the variable and what to write; set but empty reads as unset, and each function takes the
environment as a mapping for tests (docs/reference/environment.md lists every variable)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import overload


def text(name: str, env: Mapping[str, str] = os.environ) -> str | None:
    """``env[name]``, or None when unset or empty."""
    return env.get(name) or None


@overload
def whole_number(
    name: str, default: int, *, low: int = ..., example: int | None = ..., why: str = ..., env: Mapping[str, str] = ...
) -> int: ...
@overload
def whole_number(
    name: str, default: None, *, low: int = ..., example: int | None = ..., why: str = ..., env: Mapping[str, str] = ...
) -> int | None: ...
def whole_number(
    name: str,
    default: int | None,
    *,
    low: int = 0,
    example: int | None = None,
    why: str = "",
    env: Mapping[str, str] = os.environ,
) -> int | None:
    """``env[name]`` as an int >= ``low``, ``default`` when unset or empty; else ValueError naming the
    variable, ``why`` it is read and what to write (``example``)."""
    raw = env.get(name, "")
    if raw.strip() == "":
        return default
    try:
        number = int(raw.strip(), 10)
    except ValueError:
        number = None
    if number is None or number < low:
        said = f" ({why})" if why else ""
        raise ValueError(
            f"{name}={raw!r}: write a whole number >= {low}, such as {name}={low if example is None else example}"
            f"{said}, or unset {name}"
        )
    return number


def seconds_setting(
    value: float | None, env_name: str, default: float, *, arg: str = "", env: Mapping[str, str] = os.environ
) -> float:
    """Positive finite seconds from the argument ``arg``, else ``env[env_name]``, else ``default``;
    else ValueError naming where the value came from and what to write."""
    raw: float | str  # the argument, or the variable's text
    if value is not None:
        name, raw = arg or "the argument", value
    else:
        name, raw = env_name, env.get(env_name, "")
        if raw == "":
            return float(default)
    try:
        number = math.nan if isinstance(raw, bool) else float(raw)
    except (TypeError, ValueError):
        number = math.nan
    if not 0 < number < math.inf:
        raise ValueError(f"{name}={raw!r}: write a positive number of seconds, such as {default:g} (the default)")
    return number


# torchrun's variables (a launcher's: torch.distributed.run, SLURM scripts, Lightning set the same)
_TORCHRUN = "as torchrun sets it"


def local_rank(env: Mapping[str, str] = os.environ) -> int | None:
    """``LOCAL_RANK``: this process's GPU among its node's; None when unset."""
    return whole_number("LOCAL_RANK", None, why=f"this process's index on its node, {_TORCHRUN}", env=env)


def rank_and_world_size(env: Mapping[str, str] = os.environ) -> tuple[int, int] | None:
    """``RANK`` and ``WORLD_SIZE`` when both are set; None otherwise (one process)."""
    if text("RANK", env) is None or text("WORLD_SIZE", env) is None:
        return None
    rank = whole_number("RANK", 0, why=f"this process's rank, {_TORCHRUN}", env=env)
    world_size = whole_number("WORLD_SIZE", 1, low=1, example=2, why=f"the number of ranks, {_TORCHRUN}", env=env)
    return rank, world_size


def ranks_on_this_node(env: Mapping[str, str] = os.environ) -> int:
    """``LOCAL_WORLD_SIZE``, else ``WORLD_SIZE``, else 1: the ranks of this job on this machine."""
    if text("LOCAL_WORLD_SIZE", env) is not None:
        why = f"the number of ranks on this node, {_TORCHRUN}"
        return whole_number("LOCAL_WORLD_SIZE", 1, low=1, example=2, why=why, env=env)
    return whole_number("WORLD_SIZE", 1, low=1, example=2, why=f"the number of ranks, {_TORCHRUN}", env=env)


def visible_devices(env: Mapping[str, str] = os.environ) -> str | None:
    """``CUDA_VISIBLE_DEVICES`` as written (CUDA's list of GPU indices or UUIDs): None when unset,
    "" when set but empty (no GPU: unlike the other variables, empty is not unset)."""
    return env.get("CUDA_VISIBLE_DEVICES")


#: what Ray adds to its worker processes' niceness (15 unless set); the embedded cluster sets 0
RAY_WORKER_NICENESS = "RAY_worker_niceness"

#: Ray's least object store (its OBJECT_STORE_MINIMUM_MEMORY_BYTES): less is refused when Ray starts
OBJECT_STORE_MIN_BYTES = 75 << 20


def object_store_bytes(env: Mapping[str, str] = os.environ) -> int:
    """``HYBRIDLOAD_OBJECT_STORE_BYTES``: the embedded Ray cluster's object store, 1 GiB by default."""
    why = "the embedded Ray cluster's object store in bytes, 75 MiB at least"
    return whole_number(
        "HYBRIDLOAD_OBJECT_STORE_BYTES", 1 << 30, low=OBJECT_STORE_MIN_BYTES, example=1 << 30, why=why, env=env
    )
