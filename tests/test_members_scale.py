"""The pool's membership table at scale (lanes/_ray/members.py): picking a member costs the
same at 4,096 actors as at 4 (buckets by load, counted states, a free list of worker indices),
still picks the least loaded and avoids a member already running the task; and a pool starts
working when its first actor is ready (lanes/_ray/startup.py), on recorded refs."""

import re
import time
from pathlib import Path

import pytest

from hybridload.lanes._ray.members import LIFECYCLE, Event, IllegalTransition, Members, State, next_state
from hybridload.lanes._ray.pool_stats import PoolStats
from hybridload.lanes._ray.startup import await_first_ready, start_waves


def pool(k):
    members = Members(PoolStats())
    ms = [members.add(lambda key, index: f"actor-{key}", "N", initial=True) for _ in range(k)]
    for m in ms:
        members.ready(m)
    return members, ms


def test_pick_takes_the_least_loaded_and_avoids_a_member_running_the_same_task():
    members, ms = pool(3)
    picked = [members.pick(seq) for seq in range(3)]
    assert sorted(m.key for m in picked) == [0, 1, 2]  # one each before any gets a second
    again = members.pick(0)  # a second copy of task 0 goes to another member
    assert again is not picked[0]
    idle = next(k for k, m in enumerate(picked) if m is not again and m is not picked[0])
    members.release(picked[idle], idle)
    assert picked[idle].load == 0 and members.pick(5) is picked[idle]  # the one member with no load
    assert members.count(State.READY) == 3 and members.usable == 3


def test_a_dead_members_running_batch_is_its_oldest_call_not_ended_whatever_order_the_deaths_arrive_in():
    """An actor runs its calls in the order sent: when it dies, the batch it ran is the oldest
    call still open; the ones queued behind it are bystanders, whichever report comes first."""
    for first_report in (0, 2):
        members, (m,) = pool(1)
        for seq in (0, 2, 4):
            members.pick(seq)
            members.sent(m, seq)
        members.release(m, 0)  # batch 0 ended (answered before the death)
        order = [4, 2] if first_report == 0 else [2, 4]
        ran = {}
        for seq in order:  # the death reaches each open call, in Ray's order
            ran[seq] = members.was_running(m, seq)
            members.release(m, seq)
        assert ran == {2: True, 4: False}, (first_report, ran)
        assert m.sent == [] and m.load == 0


def test_dead_and_draining_members_are_never_picked_and_indices_are_reused_lowest_first():
    members, ms = pool(4)
    members.dead(ms[1], lost=True)
    members.drain(ms[2])
    assert {members.pick(s).key for s in range(6)} == {0, 3}
    assert members.count(State.READY) == 2 and members.count(State.DRAINING) == 1
    members.dead(ms[0], lost=False)
    new = [members.add(lambda key, index: f"actor-{key}", "N", initial=False) for _ in range(3)]
    assert [m.index for m in new] == [0, 1, 4]  # the freed indices first, lowest first
    assert members.count(State.STARTING) == 3


def test_pick_and_release_cost_does_not_grow_with_the_pool():
    """1,000 pick+release at 4 and at 4,096 members: within 3x (the old scan was ~100x)."""

    def cost(k):
        members, _ = pool(k)
        t0 = time.perf_counter()
        for seq in range(2000):
            m = members.pick(seq)
            members.release(m, seq)
        return time.perf_counter() - t0

    small, large = min(cost(4) for _ in range(3)), min(cost(4096) for _ in range(3))
    assert large < 3 * small + 0.01, (small, large)


class Ref:
    """A recorded actor ready() ref: done at ``at`` seconds, with ``error`` or not."""

    def __init__(self, name, at, error=None):
        self.name, self.at, self.error, self.callbacks = name, at, error, []

    def future(self):
        return self

    def add_done_callback(self, fn):
        self.callbacks.append(fn)

    def exception(self):
        return self.error


class RecordedRay:
    """ray.wait / ray.get over recorded refs on a fake clock (no cluster: what is tested is the
    order of waiting, not Ray)."""

    def __init__(self):
        self.now = 0.0

    def wait(self, refs, num_returns, timeout):
        soonest = min(refs, key=lambda r: r.at)
        if soonest.at > self.now + timeout:
            self.now += timeout
            return [], refs
        self.now = max(self.now, soonest.at)
        return [soonest], [r for r in refs if r is not soonest]

    def get(self, ref):
        if ref.error:
            raise ref.error


def test_the_pool_starts_at_its_first_ready_actor_and_the_rest_report_later(monkeypatch):
    ray = RecordedRay()
    refs = {
        Ref("slow", 40.0): "m-slow",
        Ref("fails", 0.5, RuntimeError("no CPU")): "m-fails",
        Ref("fast", 1.5): "m-fast",
    }
    seen = []
    await_first_ready(ray, refs, lambda m, exc: seen.append((m, exc)), 120.0, ["A", "B", "C"])
    assert ray.now == 1.5  # not the 40 s of the slow one
    assert [m for m, _ in seen] == ["m-fails", "m-fast"] and isinstance(seen[0][1], RuntimeError)
    slow = next(r for r in refs if r.name == "slow")
    assert len(slow.callbacks) == 1
    slow.callbacks[0](slow)
    assert seen[-1] == ("m-slow", None)


def test_a_pool_whose_actors_all_fail_or_never_answer_raises():
    with pytest.raises(RuntimeError, match="no CPU"):
        await_first_ready(RecordedRay(), {Ref("a", 1, RuntimeError("no CPU")): "a"}, lambda m, e: None, 10, ["A"])
    with pytest.raises(TimeoutError, match="no Ray actor started within 5 s on nodes"):
        await_first_ready(RecordedRay(), {Ref("a", 50): "a"}, lambda m, e: None, 5, ["A"])


def test_a_nodes_first_actor_starts_alone_and_every_node_gets_one_at_once():
    assert start_waves(["A", "A", "B", "A", "C", "B"]) == (["A", "B", "C"], ["A", "A", "B"])
    assert start_waves(["A"]) == (["A"], [])
    assert start_waves([]) == ([], [])


def test_a_dealt_batch_goes_to_its_worker_whatever_the_loads_while_that_worker_lives():
    members, ms = pool(3)
    assert [members.pick(seq, dealt=seq % 3).index for seq in range(6)] == [0, 1, 2, 0, 1, 2]  # in turn
    members.pick(9, dealt=0)
    assert ms[0].load == 3 and members.pick(10, dealt=0) is ms[0]  # the most loaded, as torch's worker queue
    assert members.pick(10, dealt=0) is not ms[0]  # but never a second copy of the same batch
    starting = members.add(lambda key, index: f"actor-{key}", "N", initial=False)
    assert members.pick(11, dealt=starting.index) is starting and starting.load == 1  # Ray queues the call
    members.ready(starting)
    members.dead(ms[1], lost=True)
    assert members.pick(12, dealt=1) is not None  # its worker is dead: the least loaded takes it
    assert members.pick(13, dealt=1).index != 1


def test_the_lifecycle_table_on_the_cluster_changes_page_is_the_one_the_table_applies():
    page = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "cluster-changes.md").read_text()
    rows = re.findall(r"^\| `([A-Z]+)` \| ([a-z ]+) \| `([A-Z]+)` \|", page, re.M)
    assert {(State[s], Event(e), State[n]) for s, e, n in rows} == {(s, e, n) for (s, e), n in LIFECYCLE.items()}
    assert len(rows) == len(LIFECYCLE)


def _member_in(state):
    """A table with one member brought to ``state`` through the lifecycle's own events."""
    members = Members(PoolStats())
    m = members.add(lambda key, index: f"actor-{key}", "A", initial=True)
    if state in (State.READY, State.DRAINING):
        members.ready(m)
    if state is State.DRAINING:
        members.drain(m)
    if state is State.DEAD:
        members.dead(m, lost=True)
    assert m.state is state
    return members, m


@pytest.mark.parametrize("state", list(State))
def test_every_event_in_every_state_gives_the_state_the_lifecycle_says_and_an_unlisted_pair_is_refused(state):
    for event in Event:
        members, m = _member_in(state)
        before = members.stats.as_dict()
        if state is not State.DEAD and (state, event) not in LIFECYCLE:
            with pytest.raises(IllegalTransition, match=f"'{event.value}' in state {state.name}"):
                next_state(state, event)
            with pytest.raises(IllegalTransition):
                members.on(m, event)
            assert m.state is state and members.consistent() == [], (state, event)
            continue
        expected = State.DEAD if state is State.DEAD else LIFECYCLE[(state, event)]
        assert next_state(state, event) is expected
        moved = members.on(m, event)
        assert m.state is expected and moved == (expected is not state), (state, event)
        assert members.consistent() == [], (state, event)
        assert (m in members.members()) == (expected is not State.DEAD)
        if not moved:  # a late report: counted nowhere
            assert members.stats.as_dict()["lost"] == before["lost"]
            assert members.stats.as_dict()["failed_starts"] == before["failed_starts"]


def test_the_pairs_the_lifecycle_refuses_are_only_those_no_report_can_make():
    refused = {(s, e) for s in State for e in Event if s is not State.DEAD and (s, e) not in LIFECYCLE}
    # a ready() answers once, and a ready actor's start cannot fail: a second report is a bug
    assert refused == {(State.READY, Event.READY), (State.READY, Event.START_FAILED)}
