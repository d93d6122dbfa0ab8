"""When the cluster changes under the loader, the logic without Ray: the dispatcher runs a Ray
lane's batches on its local stand-in while that lane has no worker and moves them back when it
has; a batch no lane can take ends in a NoLaneError naming why each lane cannot; the pool's
answer to an empty target (lanes/_ray/capacity.py), its node events and its time without actors,
driven by recorded node tables (the real cluster runs in test_cluster_changes_ray.py and
test_multihost.py)."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest

from hybridload import LoaderPolicy
from hybridload.raycluster._connect import NodeInfo
from hybridload.raycluster._placement import PlacementRules
from hybridload.errors import NoActorsError, NoLaneError
from hybridload.execution._retry import RetryRules
from hybridload.execution._pass_config import PassConfig
from hybridload.execution._stream import BatchStream
from hybridload.lanes._base import BatchTask, Lane, LaneKind
from hybridload.lanes._ray.capacity import Capacity
from hybridload.lanes._ray.elastic import Keeper
from hybridload.lanes._ray.members import Members
from hybridload.lanes._ray.pool_stats import PoolStats

#: policies, specs and fakes only: the Ray and process words here start nothing (conftest.tiers_of)
pytestmark = pytest.mark.starts_nothing

WAIT_S = 10.0


class ThreadLane(Lane):
    """A lane answering each task on a thread with ``(seq, name)``; ``slots`` may change (0: no
    worker, as a Ray lane without actors) and ``why`` is what ``unavailable()`` says then."""

    kind = LaneKind.CPU_LOCAL

    def __init__(self, name: str, slots: int, why: str = "", fail: Exception | None = None):
        super().__init__()
        self.name, self.slots, self.parallelism, self.why, self.fail = name, slots, max(slots, 1), why, fail
        self.ran: list[int] = []

    def describe(self) -> str:
        return self.name

    def run_batch(self, task):
        return (task.seq, self.name)

    def unavailable(self) -> str:
        return self.why if self.slots == 0 else ""

    def _start(self, task, done) -> None:
        self.ran.append(task.seq)
        result = self.fail if self.fail is not None else (task.seq, self.name)
        threading.Thread(target=done, args=(task, result), daemon=True).start()


def tasks(n):
    return [BatchTask(i, 0, np.array([i]), size=1) for i in range(n)]


def test_batches_run_on_the_stand_in_while_the_ray_lane_has_no_worker_and_move_back_when_it_has():
    ray_lane, local = ThreadLane("ray", slots=0, why="no node"), ThreadLane("local-fallback", slots=2)
    got = []
    with BatchStream([ray_lane, local], tasks(12), PassConfig(window=2, batch_timeout_s=WAIT_S), fallback=[local]) as s:
        got += [next(s) for _ in range(4)]
        ray_lane.slots = 2  # a node joined: the pool has actors again
        got += list(s)
    assert [seq for seq, _ in got] == list(range(12))  # every batch once, in order
    assert ray_lane.ran and min(ray_lane.ran) >= 4 and local.ran[:4] == [0, 1, 2, 3]
    assert [name for _, name in got][-1] == "ray"  # the work moved back to the Ray lane


def test_the_stand_in_takes_the_uncapped_rest_beside_a_capped_gpu_lane_while_the_ray_lane_is_empty():
    from hybridload.execution._admission import ShareAdmission

    gpu = ThreadLane("gpu", slots=2)
    gpu.kind = LaneKind.GPU
    ray_lane, local = ThreadLane("ray", slots=0, why="no node"), ThreadLane("local-fallback", slots=2)
    with BatchStream(
        [gpu, ray_lane, local],
        tasks(10),
        PassConfig(window=4, batch_timeout_s=WAIT_S),
        fallback=[local],
        admission=ShareAdmission({LaneKind.GPU: 0.5}),
    ) as s:
        got = list(s)
    assert [seq for seq, _ in got] == list(range(10))
    assert gpu.ran and local.ran and len(gpu.ran) <= 6  # the cap holds; the stand-in ran the rest


def test_a_batch_no_lane_can_take_names_each_lanes_reason_and_what_to_do():
    ray_lane = ThreadLane("ray", slots=0, why="node 1a2b3c4d (192.0.2.2) lost at 02:41:07 UTC")
    with BatchStream([ray_lane], tasks(3), PassConfig(window=1, batch_timeout_s=WAIT_S)) as s:
        with pytest.raises(NoLaneError) as err:
            next(s)
    msg = str(err.value)
    assert err.value.seq == 0 and isinstance(err.value, RuntimeError)
    assert "lane 'ray': node 1a2b3c4d (192.0.2.2) lost at 02:41:07 UTC" in msg
    assert "What to do: add or restart worker nodes" in msg and "on_no_actors='local'" in msg


def test_a_broken_lane_is_named_with_its_last_error():
    only = ThreadLane("only", slots=1, fail=RuntimeError("decoder crashed"))
    with BatchStream(
        [only], tasks(3), PassConfig(window=1, batch_timeout_s=WAIT_S, rules=RetryRules(max_retries=5, break_after=2))
    ) as s:
        with pytest.raises(
            NoLaneError,
            match=r"lane 'only': broken after 2 failed batches in a row "
            r"\(last: RuntimeError: decoder crashed\).*max_retries",
        ):
            next(s)


# -- the pool's answer to an empty target, on recorded node tables


def node(nid, cpus=1, trainer=False, address="192.0.2.2"):
    return NodeInfo(node_id=nid, address=address, cpus=cpus, is_trainer=trainer)


TRAINER = node("T" * 8, cpus=1, trainer=True, address="192.0.2.1")
RULES = PlacementRules(placement="remote-first", reserve_local_cpus=1, cpu_actors=1, rank=0, world_size=1)


def capacity(on_no_actors, actor_wait_s=60.0, hold=None):
    members = Members(PoolStats(), hold=on_no_actors != "local" if hold is None else hold)
    return Capacity(
        on_no_actors=on_no_actors,
        actor_wait_s=actor_wait_s,
        rules=RULES,
        members=members,
        stats=members.stats,
        name="ray",
    ), members


def test_no_capacity_at_start_under_local_starts_empty_with_one_warning_naming_what_is_missing(caplog):
    cap, _ = capacity("local")
    with caplog.at_level(logging.WARNING, logger="hybridload.lanes._ray.capacity"):
        where, _ = cap.first_target(lambda: [TRAINER])
        cap.after_step([], [TRAINER])  # the keeper's next steps: no second warning
    assert where == []
    (rec,) = caplog.records
    assert "no CPU in the Ray cluster for rank 0's actors" in rec.message and "192.0.2.1 1 CPU (trainer)" in rec.message
    assert "reserve_local_cpus=1" in rec.message and "local lane" in rec.message
    assert "no node with a free CPU for rank 0" in cap.unavailable()


def test_no_capacity_at_start_under_raise_is_a_named_error_at_once():
    cap, _ = capacity("raise")
    with pytest.raises(
        NoActorsError,
        match=r"cpu_actors=1 but rank 0 has 0 CPU slots.*nodes now: 192.0.2.1 1 CPU "
        r"\(trainer\).*on_no_actors='local'",
    ):
        cap.first_target(lambda: [TRAINER])


def test_wait_polls_the_node_table_until_a_node_joins():
    tables = iter([[TRAINER], [TRAINER], [TRAINER, node("B" * 8)]])
    cap, _ = capacity("wait", actor_wait_s=WAIT_S)
    where, _ = cap.first_target(lambda: next(tables), poll_s=0.01)
    assert where == ["B" * 8]


def test_wait_raises_a_named_error_after_its_bound():
    cap, _ = capacity("wait", actor_wait_s=0.2)
    t0 = time.monotonic()
    with pytest.raises(NoActorsError, match=r"waited 0.2 s for a node.*ray start --address"):
        cap.first_target(lambda: [TRAINER], poll_s=0.05)
    assert time.monotonic() - t0 < WAIT_S


def test_wait_holds_batches_while_the_target_is_empty_and_stops_holding_after_its_bound():
    cap, members = capacity("wait", actor_wait_s=0.3)
    cap.after_step([], [TRAINER])
    assert members.usable == 1  # the lane holds its batches
    time.sleep(0.35)
    cap.after_step([], [TRAINER])
    assert members.usable == 0  # then lets them fail, naming why
    assert "waited for one: on_no_actors='wait'" in cap.unavailable()


def test_a_pool_with_a_stand_in_counts_only_ready_actors_as_usable():
    members = Members(PoolStats(), hold=False)
    m = members.add(lambda key, index: "handle", "B" * 8, initial=True)
    assert members.usable == 0  # starting: the stand-in runs the batches
    members.ready(m)
    assert members.usable == 1
    members.dead(m, lost=True)
    assert members.usable == 0  # lost, replacement not ready: no holding


def test_the_keeper_reports_joins_losses_and_drains_and_the_pool_keeps_the_lost_node_as_a_reason():
    cap, members = capacity("local")
    table = {"nodes": [TRAINER, node("B" * 8)], "draining": set()}
    spawned = []

    class Hands:  # the pool's side of the keeper (`Actors`), recording what it is asked
        def start_actor(self, nid):
            spawned.append(nid)
            return members.add(lambda k, i: "h", nid, initial=False)

        def stop_actor(self, m):
            pass

        def probe_actor(self, m):
            pass

        def send_held(self, m, task, done):
            pass

    keeper = Keeper(members, Hands(), cap, table=lambda: (table["nodes"], table["draining"]), known=[TRAINER])
    keeper.step()  # B joined
    table["nodes"] = [TRAINER, node("B" * 8), node("C" * 8, address="192.0.2.3")]
    table["draining"] = {"C" * 8}
    keeper.step()  # C joined and is being drained
    table["nodes"], table["draining"] = [TRAINER], set()
    keeper.step()  # B and C left: the target is empty
    events = [(e["event"], e["node"]) for e in members.stats.as_dict()["node_events"]]
    assert events == [
        ("joined", "B" * 8),
        ("joined", "C" * 8),
        ("draining", "C" * 8),
        ("left", "B" * 8),
        ("left", "C" * 8),
        ("no actor", ""),
    ]
    assert spawned == ["B" * 8]
    why = cap.unavailable()
    assert "node BBBBBBBB (192.0.2.2) lost at" in why and "no node with a free CPU for rank 0" in why


def test_time_without_actors_counts_from_the_pool_opening_until_an_actor_is_ready():
    stats = PoolStats()
    stats.live(0, target=0)
    time.sleep(0.05)  # starting: not counted
    stats.opened()
    time.sleep(0.1)
    stats.live(1)
    time.sleep(0.05)
    assert 0.09 <= stats.as_dict()["without_actors_s"] < 0.14


@pytest.mark.parametrize("bad", ["fallback", None, 1])
def test_on_no_actors_must_be_one_of_its_choices(bad):
    with pytest.raises(ValueError, match="LoaderPolicy: on_no_actors must be one of 'local', 'wait', 'raise'"):
        LoaderPolicy(on_no_actors=bad)


def test_the_ray_lane_gets_a_local_stand_in_only_under_on_no_actors_local():
    def spec(**kw):
        return LoaderPolicy(ray_address="embedded", **kw).lane_spec()

    assert spec().actor_fallback and not spec(on_no_actors="raise").actor_fallback
    assert not spec(on_no_actors="wait").actor_fallback and not spec(cpu_actors=0).actor_fallback
