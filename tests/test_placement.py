"""placement.plan_actors, a pure function, checked directly on node tables."""

import pytest

from hybridload.cluster import NodeInfo
from hybridload.placement import plan_actors


def node(nid, cpus, trainer=False):
    return NodeInfo(node_id=nid, address="127.0.0.1", cpus=cpus, is_trainer=trainer)


CLUSTER = [node("T", 4, trainer=True), node("A", 2), node("B", 1)]


def test_remote_first_takes_every_remote_cpu_spread_across_nodes():
    assert plan_actors(CLUSTER, placement="remote-first", reserve_local_cpus=1, cpu_actors=None) == ["A", "B", "A"]


def test_remote_first_with_a_count_spills_onto_the_trainer_after_remote_cpus():
    where = plan_actors(CLUSTER, placement="remote-first", reserve_local_cpus=1, cpu_actors=5)
    assert where == ["A", "B", "A", "T", "T"]


def test_reserve_local_cpus_keeps_trainer_cpus_free():
    where = plan_actors([node("T", 4, trainer=True)], placement="local", reserve_local_cpus=3, cpu_actors=None)
    assert where == ["T"]


def test_local_placement_never_uses_other_nodes():
    assert set(plan_actors(CLUSTER, placement="local", reserve_local_cpus=0, cpu_actors=None)) == {"T"}


def test_any_placement_alternates_remote_and_trainer_slots():
    assert plan_actors(CLUSTER, placement="any", reserve_local_cpus=2, cpu_actors=None) == ["A", "T", "B", "T", "A"]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_ranks_get_disjoint_fair_shares_of_the_slots(world):
    shares = [plan_actors(CLUSTER, placement="any", reserve_local_cpus=0, cpu_actors=None, rank=r, world_size=world)
              for r in range(world)]
    sizes = [len(s) for s in shares]
    assert sum(sizes) == 7 and max(sizes) - min(sizes) <= 1
    slots = plan_actors(CLUSTER, placement="any", reserve_local_cpus=0, cpu_actors=None)
    assert sorted(x for s in shares for x in s) == sorted(slots)


def test_asking_for_more_actors_than_slots_names_the_fix():
    with pytest.raises(ValueError, match="cpu_actors=9 but rank 0 has 7 CPU slots.*lower cpu_actors"):
        plan_actors(CLUSTER, placement="any", reserve_local_cpus=0, cpu_actors=9)


def test_no_cpu_left_names_the_fix():
    with pytest.raises(ValueError, match="no CPU left.*cpu_actors=0"):
        plan_actors([node("T", 1, trainer=True)], placement="remote-first", reserve_local_cpus=1, cpu_actors=None)
