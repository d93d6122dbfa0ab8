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
"""

from __future__ import annotations

from typing import Sequence

from .cluster import NodeInfo


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


def plan_actors(nodes: Sequence[NodeInfo], *, placement: str, reserve_local_cpus: int,
                cpu_actors: int | None, rank: int = 0, world_size: int = 1) -> list[str]:
    """The node id of each of this rank's actors. Raises ValueError when the request cannot fit."""
    remote, local = _slots(nodes, placement, reserve_local_cpus)
    if placement == "local":
        pool = local
    elif placement == "any":
        pool = [s for pair in zip(remote, local) for s in pair] + remote[len(local):] + local[len(remote):]
    else:  # remote-first
        pool = remote + local if cpu_actors is not None else (remote or local)
    mine = pool[rank::world_size]
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
