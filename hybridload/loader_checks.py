"""Checks of HybridLoader's arguments and saved state: pure functions whose errors name the
field and say what to write."""

from __future__ import annotations

import numbers
from typing import Any, Mapping

import torch

from hybridload.errors import OrderMismatchError, ResumeMismatchError

#: torch.Generator.manual_seed takes ``seed + epoch`` in [-2**63, 2**64); keep seed in int64.
SEED_MIN, SEED_MAX = -(2 ** 63), 2 ** 63 - 1
#: and epoch below 2**63: with any seed, seed + epoch (+1, the pass after) stays in that range
EPOCH_MAX = 2 ** 63 - 1

#: the fields a HybridLoader state holds, with the type each must have.
STATE_FIELDS: dict[str, type | tuple] = {
    "version": int, "epoch": int, "position": int, "seed": int, "shuffle": bool, "drop_last": bool,
    "batch_size": int, "world_size": int, "rank": int, "num_samples": int}


def is_int(v: Any) -> bool:
    """An integer (Python or numpy) that is not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def check_epoch(epoch: Any, where: str = "set_epoch") -> int:
    """An epoch: an int in [0, 2**63) (the per-sample randomness is keyed by it and must be
    non-negative; the epoch's order is seeded with seed + epoch, which torch takes in 64 bits)."""
    if not is_int(epoch):
        raise TypeError(f"{where}: epoch must be an int >= 0, got {epoch!r} ({type(epoch).__name__})")
    if epoch < 0:
        raise ValueError(f"{where}: epoch must be an int >= 0, got {epoch}; count epochs from 0 "
                         "(e.g. set_epoch(0) for the first)")
    if epoch > EPOCH_MAX:
        raise ValueError(f"{where}: epoch must be below 2**63, got {epoch} (the epoch's order is seeded with "
                         "seed + epoch, which torch takes in 64 bits); count epochs from 0, or pass epoch % 2**63")
    return int(epoch)


def check_seed(seed: Any) -> int:
    """A seed: an int in [-2**63, 2**63) (torch's generator is seeded with seed + epoch)."""
    if not is_int(seed):
        raise TypeError(f"HybridLoader: seed must be an int, got {seed!r} ({type(seed).__name__})")
    if not SEED_MIN <= seed <= SEED_MAX:
        raise ValueError(f"HybridLoader: seed must fit in 64 bits ([-2**63, 2**63)), got {seed}; "
                         "reduce it, e.g. seed % 2**63")
    return int(seed)


def check_device(device: torch.device) -> None:
    """Refuse a CUDA device when torch sees none, or one beyond the device count."""
    if device.type != "cuda":
        return
    if not torch.cuda.is_available():
        raise ValueError(f"HybridLoader: device={str(device)!r} but torch sees no CUDA device here; "
                         "pass device='cpu' (or leave device unset to pick one)")
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"HybridLoader: device={str(device)!r} but only {torch.cuda.device_count()} CUDA "
                         "device(s) are visible; pick one of cuda:0..")


#: fields a state may have other values of than the loader resuming it (elastic resume)
ELASTIC = ("batch_size", "world_size", "rank")


def check_state(state: Any, mine: Mapping[str, Any], num_batches: int | None, version: int,
                order: str = "randperm") -> tuple[int, int]:
    """(epoch, position) of a saved HybridLoader state, after checking every field.

    ``mine`` holds this loader's configuration fields (seed, shuffle, ... num_samples);
    ``num_batches``: position must lie in [0, num_batches] (None: checked against the saved
    plan by `resume_plan`); the fields of `ELASTIC` may
    differ; another seed, dataset size, shuffle or drop_last is a
    `ResumeMismatchError`; ``order`` is
    this loader's epoch order: a state saved with the other is refused (a state without the
    field was saved before the setting existed: "randperm").
    """
    where = "HybridLoader.load_state_dict"
    if not isinstance(state, Mapping):
        raise TypeError(f"{where}: state must be the dict loader.state_dict() returned, got "
                        f"{type(state).__name__}")
    if state.get("order", "randperm") != order:
        raise OrderMismatchError(state.get("order"), order, where)
    missing = [k for k in STATE_FIELDS if k not in state]
    if missing:
        raise ValueError(f"{where}: the state lacks {', '.join(missing)}; pass the whole dict "
                         "loader.state_dict() returned")
    for key, kind in STATE_FIELDS.items():
        v = state[key]
        ok = isinstance(v, bool) if kind is bool else is_int(v)
        if not ok:
            raise TypeError(f"{where}: {key} must be {'a bool' if kind is bool else 'an int'}, got {v!r} "
                            f"({type(v).__name__})")
    if state["version"] != version:
        raise ValueError(f"{where}: state version {state['version']!r} is not {version}; it was saved by "
                         "another hybridload version")
    for key, want in mine.items():
        if key not in ELASTIC and state[key] != want:
            raise ResumeMismatchError(key, state[key], want, where)
    check_epoch(state["epoch"], where=f"{where}: field 'epoch'")
    if num_batches is not None and not 0 <= state["position"] <= num_batches:
        raise ValueError(f"{where}: position must be in [0, {num_batches}] (the batches of an epoch of this "
                         f"loader), got {state['position']}; save it with loader.state_dict()")
    return int(state["epoch"]), int(state["position"])


def check_source(state: Mapping[str, Any], fingerprint: str | None, where: str) -> None:
    """A state saved over another dataset of the same size (a manifest rewritten with its shards
    reordered or replaced) is a `ResumeMismatchError`: resuming would
    deliver some samples twice and others never. A state without the field (saved before it
    existed) or a source without a fingerprint has nothing to check."""
    saved = state.get("source")
    if saved is not None and fingerprint is not None and saved != fingerprint:
        raise ResumeMismatchError("source", saved, fingerprint, where)
