"""What an actor pool does while the cluster gives its rank no actor (``on_no_actors``:
docs/guide/cluster-changes.md), and the reasons it cannot run, which `NoLaneError` quotes."""

from __future__ import annotations

import logging
import time
import warnings
from collections import deque
from typing import Callable, Collection, Sequence

from hybridload.raycluster._connect import NodeInfo
from hybridload.raycluster._placement import PlacementRules, elastic_target, plan_actors
from hybridload.errors import NoActorsError
from hybridload.lanes._ray.members import Members, State
from hybridload.lanes._ray.pool_stats import PoolStats, utc_clock

log = logging.getLogger(__name__)

ON_NO_ACTORS = ("local", "wait", "raise")


class Capacity:
    """One pool's answer to an empty target.

    Args:
        on_no_actors: "local", "wait" or "raise" (``LoaderPolicy.on_no_actors``).
        actor_wait_s: how long "wait" waits for a node.
        rules: the placement rules. members, stats: the pool's table and counters.
        name: the lane's name, for messages.
    """

    def __init__(
        self,
        *,
        on_no_actors: str,
        actor_wait_s: float,
        rules: PlacementRules,
        members: Members,
        stats: PoolStats,
        name: str,
    ):
        if on_no_actors not in ON_NO_ACTORS:
            raise ValueError(f"on_no_actors must be one of {', '.join(ON_NO_ACTORS)}; got {on_no_actors!r}")
        self.on_no_actors, self.actor_wait_s, self.rules, self.name = on_no_actors, float(actor_wait_s), rules, name
        self._members, self._stats = members, stats
        self._empty_since: float | None = None
        self._empty_clock = ""
        self._why: deque[str] = deque(maxlen=3)

    # -- at start
    def first_target(
        self, read_nodes: Callable[[], list[NodeInfo]], *, fit_request: bool = False, poll_s: float = 1.0
    ) -> tuple[list[str], list[NodeInfo]]:
        """Where the pool's first actors go (node ids; empty: none yet), and the node table read."""
        nodes = read_nodes()
        if fit_request or self.on_no_actors == "raise":
            try:
                return place(nodes, self.rules, fit_request=fit_request), nodes
            except ValueError as exc:
                raise NoActorsError(
                    f"{exc} (nodes now: {describe_nodes(nodes)}); or let this rank's batches run "
                    "on this machine meanwhile: LoaderPolicy(on_no_actors='local')"
                ) from None
        where = elastic_target(nodes, (), self.rules)
        deadline = time.monotonic() + self.actor_wait_s
        while not where and self.on_no_actors == "wait" and time.monotonic() < deadline:
            time.sleep(max(0.0, min(poll_s, deadline - time.monotonic())))
            nodes = read_nodes()
            where = elastic_target(nodes, (), self.rules)
        if not where and self.on_no_actors == "wait":
            raise NoActorsError(
                f"{self.missing(nodes)}; waited {self.actor_wait_s:g} s for a node "
                "(LoaderPolicy(on_no_actors='wait')): start worker nodes (`ray start "
                "--address=<head>:<port>`), lower reserve_local_cpus, or set on_no_actors='local' "
                "to run on this machine until they join"
            )
        wanted = self.rules.cpu_actors
        if where and wanted and len(where) < wanted:
            log.warning(
                "%s lane: cpu_actors=%d but rank %d has %d free CPU slot(s) in the cluster now; running "
                "%d actor(s), more as nodes join",
                self.name,
                wanted,
                self.rules.rank,
                len(where),
                len(where),
            )
        self.after_step(where, nodes)
        return where, nodes

    # -- every keeper step
    def target(self, nodes: Sequence[NodeInfo], draining: Collection[str]) -> list[str]:
        """The node of each actor the rank wants on ``nodes`` now (the placement rules, elastic)."""
        return elastic_target(nodes, draining, self.rules)

    def after_step(self, target: Sequence[str], nodes: Sequence[NodeInfo]) -> None:
        """The keeper's step found ``target``: one warning when it becomes empty, one when it ends,
        and whether "wait" still holds the batches."""
        now = time.monotonic()
        if not target and self._empty_since is None:
            self._empty_since, self._empty_clock = now, utc_clock()
            missing = self.missing(nodes)
            self._stats.node_event("no actor")
            what = {
                "local": "its batches run on this machine's local lane until a node joins "
                "(LoaderPolicy(on_no_actors=...) to change this)",
                "wait": f"its batches wait up to {self.actor_wait_s:g} s for a node (on_no_actors='wait')",
                "raise": "its batches fail (on_no_actors='raise')",
            }[self.on_no_actors]
            log.warning("%s lane: %s; %s", self.name, missing, what)
        elif target and self._empty_since is not None:
            self._empty_since = None
            self._stats.node_event("actors again")
            log.warning(
                "%s lane: the cluster has CPUs for rank %d again (%d actor(s)); work moves back to Ray actors",
                self.name,
                self.rules.rank,
                len(target),
            )
        if self.on_no_actors == "wait":
            self._members.set_waiting(self._empty_since is not None and now - self._empty_since < self.actor_wait_s)

    def on_node(self, event: str, node: NodeInfo) -> None:
        """A node joined, left or began draining: record it (a lost node is a reason too)."""
        self._stats.node_event(event, node.node_id, node.address)
        if event == "left":
            self.note(f"node {node.node_id[:8]} ({node.address}) lost at {utc_clock()}")

    def start_failed(self, key: int, node_id: str, exc: BaseException) -> None:
        """Actor ``key`` could not start on ``node_id``: a reason, and a warning (the keeper tries again)."""
        self.note(f"actor start failed on node {node_id[:8]} with {type(exc).__name__}: {str(exc)[:200]}")
        log.warning(
            "%s: actor %d could not start on node %s (%s); trying again",
            self.name,
            key,
            node_id[:8],
            type(exc).__name__,
        )

    def go_on_locally(self, msg: str) -> None:
        """No first actor is ready in time: the local stand-in runs the batches meanwhile."""
        self.note(msg)
        log.warning("%s lane: %s; this machine's local lane runs the batches until they are ready", self.name, msg)

    def note(self, why: str) -> None:
        self._why.append(why)

    # -- why the lane cannot run
    def unavailable(self) -> str:
        """Why the pool has no ready actor ("" while it has one)."""
        if self._members.count(State.READY):
            return ""
        parts = list(self._why)
        if self._empty_since is not None:
            parts.append(
                f"no node with a free CPU for rank {self.rules.rank} since {self._empty_clock}"
                + (" (waited for one: on_no_actors='wait')" if self.on_no_actors == "wait" else "")
            )
        elif self._members.count(State.STARTING):
            parts.append("its actors are still starting")
        return "; ".join(parts) or "no actor ready"

    def missing(self, nodes: Sequence[NodeInfo]) -> str:
        """What is missing, in words: the rules and the nodes that leave this rank no CPU."""
        return (
            f"no CPU in the Ray cluster for rank {self.rules.rank}'s actors ({self.rules.describe()}; "
            f"nodes: {describe_nodes(nodes)})"
        )


def describe_nodes(nodes: Sequence[NodeInfo]) -> str:
    """``192.0.2.1 1 CPU (trainer), 192.0.2.2 2 CPUs`` or ``none``."""
    return (
        ", ".join(
            f"{n.address} {n.cpus} CPU{'s' if n.cpus != 1 else ''}{' (trainer)' if n.is_trainer else ''}" for n in nodes
        )
        or "none"
    )


def place(nodes, rules: PlacementRules, *, fit_request: bool) -> list[str]:
    """plan_actors; with ``fit_request`` a ``cpu_actors`` beyond this rank's slots places as many as
    fit, with one warning."""
    cpu_actors = rules.cpu_actors
    try:
        return plan_actors(nodes, rules)
    except ValueError:
        if not fit_request or not cpu_actors:
            raise
    for n in range(cpu_actors - 1, 0, -1):
        try:
            where = plan_actors(nodes, rules.with_actors(n))
        except ValueError:
            continue
        warnings.warn(
            f"{cpu_actors} workers asked for but this rank has {n} free CPU slot(s) in the Ray "
            f"cluster; running {n} actor(s), each taking batches in turn (as torch's DataLoader "
            "with more workers than cores, the batches are the same)",
            stacklevel=5,
        )
        return where
    return plan_actors(nodes, rules)  # not even one fits: its error names why
