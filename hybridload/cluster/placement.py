"""Where a rank's Ray CPU actors go: a pure function of the cluster's nodes and the policy.

Slots are CPUs an actor may take (one actor, one CPU). The trainer's node offers its CPUs
less ``reserve_local_cpus``; other nodes offer all of theirs.

* "remote-first": slots on other nodes first, then the trainer's.
  With ``cpu_actors=None`` it takes every remote slot, or — with no remote CPUs —
  the trainer's spare slots.
* "any": every slot, in node order, the trainer's node not preferred either way.
* "local": the trainer's node only.

Under DDP each rank gets a fair, disjoint share: slots are dealt round-robin,
rank ``r`` takes slots ``r, r + world_size, ...``.

The elastic pool re-applies the same rules while it runs: `elastic_target` is where
the rank's actors should be on the node table as it is now (nodes being drained left out,
a count that no longer fits capped, never an error), and `reconcile` the actors to
start and to stop to get there from where they are.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Collection, Sequence

from hybridload.cluster.connect import NodeInfo


def _slots(nodes: Sequence[NodeInfo], placement: str, reserve_local_cpus: int) -> tuple[list[str], list[str]]:
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


def _share(nodes: Sequence[NodeInfo], placement: str, reserve_local_cpus: int, cpu_actors: int | None,
           rank: int, world_size: int) -> list[str]:
    """This rank's slots, in the order they are taken."""
    remote, local = _slots(nodes, placement, reserve_local_cpus)
    if placement == "local":
        pool = local
    elif placement == "any":
        pool = [s for pair in zip(remote, local) for s in pair] + remote[len(local):] + local[len(remote):]
    else:  # remote-first
        pool = remote + local if cpu_actors is not None else (remote or local)
    return pool[rank::world_size]


def plan_actors(nodes: Sequence[NodeInfo], *, placement: str, reserve_local_cpus: int,
                cpu_actors: int | None, rank: int = 0, world_size: int = 1) -> list[str]:
    """The node id of each of this rank's actors. Raises ValueError when the request cannot fit."""
    mine = _share(nodes, placement, reserve_local_cpus, cpu_actors, rank, world_size)
    if cpu_actors is None:
        if not mine:
            total = sum(n.cpus for n in nodes)
            raise ValueError(
                f"no CPU left for rank {rank}'s actors under placement={placement!r} (cluster CPUs: {total}, "
                f"reserve_local_cpus={reserve_local_cpus}, world_size={world_size}); lower reserve_local_cpus, "
                "add nodes, or use cpu_actors=0 for the in-process lane")
        return mine
    if cpu_actors > len(mine):
        raise ValueError(
            f"cpu_actors={cpu_actors} but rank {rank} has {len(mine)} CPU slots under placement={placement!r} "
            f"(reserve_local_cpus={reserve_local_cpus}, world_size={world_size}); lower cpu_actors or add nodes")
    return mine[:cpu_actors]


def elastic_target(nodes: Sequence[NodeInfo], draining: Collection[str] = (), *, placement: str,
                   reserve_local_cpus: int, cpu_actors: int | None, rank: int = 0, world_size: int = 1) -> list[str]:
    """Where this rank's actors belong on the node table as it is now: the rules of
    `plan_actors` over the nodes not being drained, with ``cpu_actors`` capped at the
    slots there are (a pool that lost nodes runs what fits and grows back when nodes join);
    an empty list when nothing fits."""
    usable = [n for n in nodes if n.node_id not in draining]
    mine = _share(usable, placement, reserve_local_cpus, cpu_actors, rank, world_size)
    return mine if cpu_actors is None else mine[:cpu_actors]


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
