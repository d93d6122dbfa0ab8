"""How an `ActorPool` runs, as one frozen value checked when made; what a pool *is* (its worker
class, init args, worker index) is the subclass's, not configuration."""

from __future__ import annotations

import os
from dataclasses import dataclass
from numbers import Integral, Real

from hybridload._environment import seconds_setting
from hybridload.raycluster._placement import PlacementRules
from hybridload.lanes._ray.capacity import ON_NO_ACTORS


#: how long an actor's start may take when neither the config nor the environment says (seconds)
DEFAULT_START_TIMEOUT_S = 120.0
START_TIMEOUT_ENV = "HYBRIDLOAD_ACTOR_START_TIMEOUT_S"


def start_timeout_seconds(ready_timeout_s: float | None, env=os.environ) -> float:
    """How long an actor's start may take: the argument, else HYBRIDLOAD_ACTOR_START_TIMEOUT_S, else
    120 s."""
    return seconds_setting(ready_timeout_s, START_TIMEOUT_ENV, DEFAULT_START_TIMEOUT_S, arg="ready_timeout_s", env=env)


def _seconds(value, *, zero_ok: bool) -> bool:
    if not isinstance(value, Real) or isinstance(value, bool):
        return False
    number = float(value)
    return number == number and (number >= 0 if zero_ok else number > 0)


@dataclass(frozen=True, kw_only=True)
class PoolConfig:
    """An actor pool's settings.

    Attributes:
        rules: where the rank's actors go (`PlacementRules`).
        ray_address: the cluster, as `hybridload.raycluster.acquire` takes it.
        fallback_embedded: with "auto", start the embedded cluster when none is found.
        tasks_per_actor: calls in flight per actor (2: the next batch waits in the actor's queue).
        ready_timeout_s: how long an actor's start may take (docs/guide/cluster-changes.md); None:
            ``HYBRIDLOAD_ACTOR_START_TIMEOUT_S``, else 120 s.
        node_poll_s: seconds between the keeper's reads of the node table; None:
            ``HYBRIDLOAD_NODE_POLL_S``, else 5 s.
        on_no_actors: "local", "wait" or "raise"; no default here, so the user's field holds it (the
            drop-in, with no local lane beside its pools, says "raise").
        actor_wait_s: with ``on_no_actors="wait"``, how long to wait for a node (seconds).
    """

    rules: PlacementRules
    ray_address: str | None = None
    fallback_embedded: bool = False
    tasks_per_actor: int = 2
    ready_timeout_s: float | None = None
    node_poll_s: float | None = None
    on_no_actors: str
    actor_wait_s: float = 120.0

    def __post_init__(self):
        if not isinstance(self.rules, PlacementRules):
            raise TypeError(
                f"rules must be a PlacementRules(placement=..., reserve_local_cpus=..., cpu_actors=..., "
                f"rank=..., world_size=...); got {type(self.rules).__name__}"
            )
        if self.ray_address is not None and not isinstance(self.ray_address, str):
            raise TypeError(f"ray_address must be None, 'auto', 'embedded' or 'host:port'; got {self.ray_address!r}")
        if not (
            isinstance(self.tasks_per_actor, Integral)
            and not isinstance(self.tasks_per_actor, bool)
            and self.tasks_per_actor >= 1
        ):
            raise ValueError(
                f"tasks_per_actor must be a whole number >= 1 (2: one call running, one queued); "
                f"got {self.tasks_per_actor!r}"
            )
        if self.ready_timeout_s is not None and not _seconds(self.ready_timeout_s, zero_ok=False):
            raise ValueError(
                f"ready_timeout_s must be a number of seconds > 0, or None for {START_TIMEOUT_ENV} "
                f"(default 120); got {self.ready_timeout_s!r}"
            )
        if self.node_poll_s is not None and not _seconds(self.node_poll_s, zero_ok=False):
            raise ValueError(
                f"node_poll_s must be a number of seconds > 0, or None for HYBRIDLOAD_NODE_POLL_S "
                f"(default 5); got {self.node_poll_s!r}"
            )
        if self.on_no_actors not in ON_NO_ACTORS:
            raise ValueError(
                f"on_no_actors must be one of {', '.join(map(repr, ON_NO_ACTORS))}; got {self.on_no_actors!r}"
            )
        if not _seconds(self.actor_wait_s, zero_ok=True):
            raise ValueError(f"actor_wait_s must be a number of seconds >= 0; got {self.actor_wait_s!r}")
