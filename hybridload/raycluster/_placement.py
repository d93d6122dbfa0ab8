"""Where a rank's Ray CPU actors go, a pure function of the nodes and the `PlacementRules`, so
the elastic pool re-applies it to the node table as it changes (`elastic_target`, `reconcile`:
never an error). The rules: docs/guide/cluster.md, "Where the actors go"."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from numbers import Integral
from typing import Collection, Sequence

from hybridload.raycluster._connect import NodeInfo

PLACEMENTS = ("remote-first", "any", "local")


def _whole(value, at_least: int) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool) and int(value) >= at_least


@dataclass(frozen=True, kw_only=True)
class PlacementRules:
    """Where one rank's Ray CPU actors may go: the policy's part of `plan_actors`.

    Attributes:
        placement: "remote-first", "any" or "local" (docs/guide/cluster.md).
        reserve_local_cpus: CPUs of the trainer's node kept free for training (0: none kept); no
            default here: the user's field holds it (``LoaderPolicy``: 1, the drop-in: 0).
        cpu_actors: this rank's actors; None: every slot the placement gives the rank.
        rank: this rank, ``0 <= rank < world_size``.
        world_size: the ranks sharing the cluster's slots (each gets a disjoint, fair share).
    """

    placement: str = "remote-first"
    reserve_local_cpus: int
    cpu_actors: int | None = None
    rank: int = 0
    world_size: int = 1

    def __post_init__(self):
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(map(repr, PLACEMENTS))}; got {self.placement!r}")
        if not _whole(self.reserve_local_cpus, 0):
            raise ValueError(
                "reserve_local_cpus must be a whole number of CPUs >= 0 (0: actors may take every CPU "
                f"of the trainer's node); got {self.reserve_local_cpus!r}"
            )
        if self.cpu_actors is not None and not _whole(self.cpu_actors, 0):
            raise ValueError(
                "cpu_actors must be a whole number of actors >= 0, or None for every CPU slot the "
                f"placement gives this rank; got {self.cpu_actors!r}"
            )
        if not _whole(self.world_size, 1):
            raise ValueError(f"world_size must be a whole number of ranks >= 1; got {self.world_size!r}")
        if not _whole(self.rank, 0) or self.rank >= self.world_size:
            raise ValueError(
                f"rank must be a whole number from 0 to world_size - 1 = {self.world_size - 1}; got {self.rank!r}"
            )

    def with_actors(self, cpu_actors: int | None) -> "PlacementRules":
        """The same rules asking for ``cpu_actors`` actors."""
        return replace(self, cpu_actors=cpu_actors)

    def describe(self) -> str:
        """The rules in the words of their fields, for messages."""
        return (
            f"placement={self.placement!r}, cpu_actors={self.cpu_actors}, "
            f"reserve_local_cpus={self.reserve_local_cpus}, world_size={self.world_size}"
        )


def _slots(nodes: Sequence[NodeInfo], reserve_local_cpus: int) -> tuple[list[str], list[str]]:
    remote, local = [], []
    for n in nodes:
        if n.is_trainer:
            local += [n.node_id] * max(0, n.cpus - reserve_local_cpus)
        else:
            remote += [n.node_id] * n.cpus
    # interleave remote nodes so a partial take spreads across them
    by_node: dict[str, int] = {}
    for nid in remote:
        by_node[nid] = by_node.get(nid, 0) + 1
    spread = []
    while any(by_node.values()):
        for nid in list(by_node):
            if by_node[nid]:
                spread.append(nid)
                by_node[nid] -= 1
    return spread, local


def _share(nodes: Sequence[NodeInfo], rules: PlacementRules) -> list[str]:
    """This rank's slots, in the order they are taken."""
    remote, local = _slots(nodes, rules.reserve_local_cpus)
    if rules.placement == "local":
        pool = local
    elif rules.placement == "any":
        pool = [s for pair in zip(remote, local) for s in pair] + remote[len(local) :] + local[len(remote) :]
    else:  # remote-first
        pool = remote + local if rules.cpu_actors is not None else (remote or local)
    return pool[rules.rank :: rules.world_size]


def plan_actors(nodes: Sequence[NodeInfo], rules: PlacementRules) -> list[str]:
    """The node id of each of this rank's actors. Raises ValueError when the request cannot fit."""
    mine = _share(nodes, rules)
    r = rules
    if r.cpu_actors is None:
        if not mine:
            total = sum(n.cpus for n in nodes)
            raise ValueError(
                f"no CPU left for rank {r.rank}'s actors under placement={r.placement!r} (cluster CPUs: {total}, "
                f"reserve_local_cpus={r.reserve_local_cpus}, world_size={r.world_size}); lower reserve_local_cpus, "
                "add nodes, or use cpu_actors=0 for the in-process lane"
            )
        return mine
    if r.cpu_actors > len(mine):
        raise ValueError(
            f"cpu_actors={r.cpu_actors} but rank {r.rank} has {len(mine)} CPU slots under placement={r.placement!r} "
            f"(reserve_local_cpus={r.reserve_local_cpus}, world_size={r.world_size}); lower cpu_actors or add nodes"
        )
    return mine[: r.cpu_actors]


def elastic_target(nodes: Sequence[NodeInfo], draining: Collection[str], rules: PlacementRules) -> list[str]:
    """Where this rank's actors belong on the node table as it is now: the rules of
    `plan_actors` over the nodes not being drained, with ``cpu_actors`` capped at the
    slots there are (a pool that lost nodes runs what fits and grows back when nodes join);
    an empty list when nothing fits."""
    mine = _share([n for n in nodes if n.node_id not in draining], rules)
    return mine if rules.cpu_actors is None else mine[: rules.cpu_actors]


@dataclass(frozen=True)
class Changes:
    """What the pool does to match its target: start actors on ``start`` (node ids, one per
    actor) and stop the actors keyed ``stop``."""

    start: tuple[str, ...] = ()
    stop: tuple[int, ...] = ()


def reconcile(target: Sequence[str], current: Sequence[tuple[int, str]]) -> Changes:
    """From the live actors ``current`` — (key, node id), in the order to keep them (e.g. ready
    ones first, oldest first) — to ``target`` (a node id per wanted actor): the fewest starts
    and stops; an actor is kept while its node still wants one."""
    want = Counter(target)
    stop = []
    for key, node in current:
        if want[node] > 0:
            want[node] -= 1
        else:
            stop.append(key)
    start = []
    for node in target:
        if want[node] > 0:
            want[node] -= 1
            start.append(node)
    return Changes(tuple(start), tuple(stop))
