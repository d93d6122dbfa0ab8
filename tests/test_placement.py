"""placement.plan_actors, a pure function, checked directly on node tables; PlacementRules, the
rules it applies, refusing a bad value with a message that names the field and what to write."""

import pytest

from hybridload.raycluster._connect import NodeInfo
from hybridload.raycluster._placement import Changes, PlacementRules, elastic_target, plan_actors, reconcile

#: policies, specs and fakes only: the Ray and process words here start nothing (conftest.tiers_of)
pytestmark = pytest.mark.starts_nothing


def node(nid, cpus, trainer=False):
    return NodeInfo(node_id=nid, address="127.0.0.1", cpus=cpus, is_trainer=trainer)


CLUSTER = [node("T", 4, trainer=True), node("A", 2), node("B", 1)]


def test_remote_first_takes_every_remote_cpu_spread_across_nodes():
    assert plan_actors(CLUSTER, PlacementRules(placement="remote-first", reserve_local_cpus=1)) == ["A", "B", "A"]


def test_remote_first_with_a_count_spills_onto_the_trainer_after_remote_cpus():
    where = plan_actors(CLUSTER, PlacementRules(placement="remote-first", reserve_local_cpus=1, cpu_actors=5))
    assert where == ["A", "B", "A", "T", "T"]


def test_reserve_local_cpus_keeps_trainer_cpus_free():
    where = plan_actors([node("T", 4, trainer=True)], PlacementRules(placement="local", reserve_local_cpus=3))
    assert where == ["T"]


def test_local_placement_never_uses_other_nodes():
    assert set(plan_actors(CLUSTER, PlacementRules(placement="local", reserve_local_cpus=0))) == {"T"}


def test_any_placement_alternates_remote_and_trainer_slots():
    assert plan_actors(CLUSTER, PlacementRules(placement="any", reserve_local_cpus=2)) == [
        "A",
        "T",
        "B",
        "T",
        "A",
    ]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_ranks_get_disjoint_fair_shares_of_the_slots(world):
    shares = [
        plan_actors(CLUSTER, PlacementRules(placement="any", reserve_local_cpus=0, rank=r, world_size=world))
        for r in range(world)
    ]
    sizes = [len(s) for s in shares]
    assert sum(sizes) == 7 and max(sizes) - min(sizes) <= 1
    slots = plan_actors(CLUSTER, PlacementRules(placement="any", reserve_local_cpus=0))
    assert sorted(x for s in shares for x in s) == sorted(slots)


def test_asking_for_more_actors_than_slots_names_the_fix():
    with pytest.raises(ValueError, match="cpu_actors=9 but rank 0 has 7 CPU slots.*lower cpu_actors"):
        plan_actors(CLUSTER, PlacementRules(placement="any", reserve_local_cpus=0, cpu_actors=9))


def test_no_cpu_left_names_the_fix():
    with pytest.raises(ValueError, match="no CPU left.*cpu_actors=0"):
        plan_actors([node("T", 1, trainer=True)], PlacementRules(placement="remote-first", reserve_local_cpus=1))


# ---- the elastic pool's rules, on node tables recorded before and after churn
RULES = dict(placement="remote-first", reserve_local_cpus=2)
BEFORE = [node("A", 1), node("B", 1), node("T", 2, trainer=True)]
B_LOST_C_JOINED = [node("A", 1), node("C", 1), node("T", 2, trainer=True)]


def test_elastic_target_equals_the_plan_while_the_request_fits():
    for cpu_actors in (None, 1, 2):
        rules = PlacementRules(**RULES, cpu_actors=cpu_actors)
        assert elastic_target(BEFORE, (), rules) == plan_actors(BEFORE, rules)


def test_elastic_target_caps_a_count_that_no_longer_fits_instead_of_failing():
    rules = PlacementRules(**RULES, cpu_actors=2)
    assert elastic_target([node("A", 1), node("T", 2, trainer=True)], (), rules) == ["A"]
    assert elastic_target([node("T", 2, trainer=True)], (), rules) == []


def test_elastic_target_leaves_out_nodes_being_drained():
    assert elastic_target(BEFORE, {"B"}, PlacementRules(**RULES)) == ["A"]
    assert elastic_target(CLUSTER, {"A", "B"}, PlacementRules(reserve_local_cpus=1)) == ["T"] * 3


@pytest.mark.parametrize("world", [1, 2, 3])
def test_elastic_targets_of_ranks_stay_disjoint_and_fair_after_churn(world):
    for table in (BEFORE, B_LOST_C_JOINED, CLUSTER):
        shares = [
            elastic_target(table, (), PlacementRules(placement="any", reserve_local_cpus=0, rank=r, world_size=world))
            for r in range(world)
        ]
        sizes = [len(s) for s in shares]
        assert max(sizes) - min(sizes) <= 1
        assert sorted(x for s in shares for x in s) == sorted(
            elastic_target(table, (), PlacementRules(placement="any", reserve_local_cpus=0))
        )


def test_reconcile_replaces_the_lost_node_with_the_new_one_and_keeps_the_rest():
    target = elastic_target(B_LOST_C_JOINED, (), PlacementRules(**RULES))
    assert reconcile(target, [(0, "A")]) == Changes(start=("C",), stop=())


def test_reconcile_stops_actors_on_nodes_the_target_no_longer_wants_keeping_the_first_listed():
    assert reconcile(["A"], [(0, "A"), (1, "B"), (2, "A")]) == Changes(start=(), stop=(1, 2))


def test_reconcile_of_a_pool_on_target_changes_nothing():
    assert reconcile(["A", "B", "A"], [(5, "B"), (2, "A"), (9, "A")]) == Changes()


def test_reconcile_from_nothing_starts_the_whole_target_in_its_order():
    assert reconcile(["A", "B", "A"], []) == Changes(start=("A", "B", "A"))


# ---- the rules themselves: a bad value is refused where it is made, saying what to write


def test_an_unknown_placement_is_refused_naming_the_three_placements_instead_of_acting_as_remote_first():
    with pytest.raises(ValueError, match=r"placement must be one of 'remote-first', 'any', 'local'; got 'remote'"):
        PlacementRules(placement="remote", reserve_local_cpus=0)


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("reserve_local_cpus", -1, r"reserve_local_cpus must be a whole number of CPUs >= 0"),
        ("reserve_local_cpus", 1.5, r"reserve_local_cpus must be a whole number of CPUs >= 0 .*got 1.5"),
        ("cpu_actors", -1, r"cpu_actors must be a whole number of actors >= 0, or None"),
        ("cpu_actors", True, r"cpu_actors must be a whole number .*got True"),
        ("world_size", 0, r"world_size must be a whole number of ranks >= 1"),
        ("rank", 2, r"rank must be a whole number from 0 to world_size - 1 = 1; got 2"),
    ],
)
def test_placement_rules_refuse_a_bad_value_naming_the_field_and_what_to_write(field, value, words):
    kw = {"reserve_local_cpus": 0, **({"world_size": 2} if field == "rank" else {})}
    with pytest.raises(ValueError, match=words):
        PlacementRules(**{**kw, field: value})


def test_placement_rules_are_frozen_and_a_smaller_request_is_a_new_value():
    rules = PlacementRules(placement="any", reserve_local_cpus=0, cpu_actors=3, rank=1, world_size=2)
    with pytest.raises(AttributeError):
        rules.cpu_actors = 1
    assert rules.with_actors(1) == PlacementRules(
        placement="any", reserve_local_cpus=0, cpu_actors=1, rank=1, world_size=2
    )
    assert rules.describe() == "placement='any', cpu_actors=3, reserve_local_cpus=0, world_size=2"
