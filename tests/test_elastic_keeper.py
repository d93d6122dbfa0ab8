"""The elastic pool's bookkeeping (lanes/_ray/members.py) and the keeper (lanes/_ray/elastic.py): its
steps driven by recorded node tables, its inbox by posts; the keeper's hands (the pool's `Actors`:
start, stop, probe, send) record what they are asked."""

import logging
import queue
import random
import threading
import time

import pytest

from hybridload.raycluster._connect import NodeInfo
from hybridload.lanes._ray.capacity import Capacity
from hybridload.lanes._ray.elastic import Keeper, Post, next_start_bound, poll_seconds, retry_now
from hybridload.lanes._ray.members import Event, Members, State
from hybridload.raycluster._placement import PlacementRules
from hybridload.lanes._ray.pool_stats import PoolStats

from support.waits import wait_until


def node(nid, cpus=1, trainer=False):
    return NodeInfo(node_id=nid, address="127.0.0.1", cpus=cpus, is_trainer=trainer)


def table_of(*ids):
    return [node(i) for i in ids] + [node("T", 2, trainer=True)]


class CountingKeeper(Keeper):
    """A keeper that counts its flushes (one at the end of every step)."""

    flushes = 0

    def flush(self):
        self.flushes += 1
        super().flush()


class Pool:
    """Members plus a keeper whose node table is whatever the test recorded last; the pool's
    side of the keeper (`Actors`) records what it is asked."""

    def __init__(self, *nodes):
        self.members = Members(PoolStats())
        self.table, self.draining, self.stopped, self.probed, self.sent = table_of(*nodes), set(), [], [], []
        capacity = Capacity(
            on_no_actors="raise",
            actor_wait_s=0.0,
            rules=PlacementRules(placement="remote-first", reserve_local_cpus=2),
            members=self.members,
            stats=self.members.stats,
            name="test",
        )
        self.keeper = CountingKeeper(
            self.members, self, capacity, table=lambda: (self.table, self.draining), poll_s=0.5, name="test"
        )
        for nid in nodes:
            self.members.ready(self.spawn(nid, initial=True))

    def spawn(self, node_id, initial=False):
        return self.members.add(lambda key, index: f"actor-{key}", node_id, initial=initial)

    # the keeper's `Actors`
    def start_actor(self, node_id):
        return self.spawn(node_id)

    def stop_actor(self, m):
        self.stopped.append(m)

    def probe_actor(self, m):
        self.probed.append(m)

    def send_held(self, m, task, done):
        self.sent.append((m, task, done))

    @property
    def flushes(self):
        return self.keeper.flushes

    def where(self, *states):
        return sorted(m.node_id for m in self.members.members(*states))


def test_a_step_on_a_table_where_a_node_left_and_one_joined_starts_one_actor_on_the_new_node():
    p = Pool("A", "B")
    p.table = table_of("A", "C")
    p.keeper.step()
    assert p.where(State.READY) == ["A"] and p.where(State.STARTING) == ["C"]
    s = p.members.stats.as_dict()
    assert (s["lost"], s["started"], s["replaced"], s["target"]) == (1, 3, 1, 2)
    assert len(p.stopped) == 1  # the lost actor was killed by handle too


def test_a_step_grows_onto_a_node_that_joined():
    p = Pool("A")
    p.table = table_of("A", "B")
    p.keeper.step()
    assert p.where(State.STARTING) == ["B"]
    assert p.members.stats.as_dict()["grown"] == 1


def test_a_drained_node_keeps_its_actor_until_its_tasks_end_then_stops_it():
    p = Pool("A", "B")
    busy = next(m for m in p.members.members() if m.node_id == "B")
    assert p.members.pick(0) is not None and p.members.pick(1) is not None  # one task on each actor
    p.draining = {"B"}
    p.keeper.step()
    assert busy.state is State.DRAINING and p.stopped == []
    assert p.members.pick(2).node_id == "A"  # no new task goes to a draining actor
    assert p.members.release(busy, 0 if busy.key == 0 else 1)  # idle now: the pool is told to stop it
    p.keeper.step()
    assert p.stopped == [busy] and busy.state is State.DEAD
    s = p.members.stats.as_dict()
    assert (s["stopped"], s["lost"], s["target"]) == (1, 0, 1)


def test_losing_the_last_actor_keeps_one_slot_until_the_keeper_has_tried_to_replace_it():
    p = Pool("A")
    (m,) = p.members.members()
    p.members.dead(m, lost=True)
    assert p.members.usable == 1 and p.members.pick(0) is None  # the lane holds tasks meanwhile
    p.table = table_of()  # no node left for it
    p.keeper.step()
    assert p.members.usable == 0 and p.flushes == 1  # the flush fails what was held


def test_a_start_that_never_becomes_ready_is_stopped_after_the_ready_timeout():
    p = Pool("A")
    p.keeper.ready_timeout_s = 0.0
    p.table = table_of("A", "B")
    p.keeper.step()
    (starting,) = p.members.members(State.STARTING)
    p.keeper.step()
    assert starting.state is State.DEAD and starting in p.stopped
    assert p.members.stats.as_dict()["failed_starts"] == 1 and p.where(State.STARTING) == ["B"]


def test_pick_takes_the_least_loaded_ready_actor_and_avoids_a_second_copy_on_the_same_one():
    p = Pool("A", "B")
    first = p.members.pick(7)
    second = p.members.pick(7)
    assert first is not second
    p.members.release(first, 7)
    assert p.members.pick(8) is first


def test_live_count_over_time_records_each_change():
    p = Pool("A", "B")
    m = p.members.members()[0]
    p.members.dead(m, lost=True)
    assert [n for _t, n in p.members.stats.as_dict()["live_over_time"]] == [0, 1, 2, 1]


@pytest.mark.parametrize("bad", [0, -1, "soon", float("inf")])
def test_a_bad_poll_interval_is_a_clear_error(bad):
    with pytest.raises(ValueError, match=r"node_poll_s=.*: write a positive number of seconds, such as 5"):
        poll_seconds(bad)


def test_the_poll_interval_comes_from_the_environment_when_not_given(monkeypatch):
    monkeypatch.setenv("HYBRIDLOAD_NODE_POLL_S", "0.5")
    assert poll_seconds(None) == 0.5 and poll_seconds(2) == 2.0


def test_a_failed_start_of_the_only_actor_keeps_the_lane_waiting_for_the_next_try():
    p = Pool("A")
    (m,) = p.members.members()
    p.members.dead(m, lost=True)
    p.keeper.step()  # a replacement starts on A
    (starting,) = p.members.members(State.STARTING)
    p.members.dead(starting, lost=False, failed_start=True)  # ... and never comes up
    assert p.members.usable == 1  # batches wait for the next try, not fail at once
    p.keeper.step()
    assert p.where(State.STARTING) == ["A"]


def test_a_start_slower_than_its_bound_is_tried_again_with_twice_the_bound_on_that_node():
    p = Pool("A")
    p.keeper.ready_timeout_s = 10.0
    p.table = table_of("A", "B")
    p.keeper.step()
    (first,) = p.members.members(State.STARTING)
    first.born -= 11  # past the 10 s bound: stopped, tried again
    p.keeper.step()
    assert first.state is State.DEAD and first in p.stopped
    (second,) = p.members.members(State.STARTING)
    second.born -= 15  # past 10 s, within the 20 s the node has now: a loaded machine's start goes on
    p.keeper.step()
    assert second.state is State.STARTING and p.keeper.start_bound("B") == 20.0
    second.born -= 6  # 21 s: past 20 s
    p.keeper.step()
    assert second.state is State.DEAD and p.keeper.start_bound("B") == 40.0 and p.keeper.start_bound("A") == 10.0
    assert p.members.stats.as_dict()["failed_starts"] == 2


def test_a_node_s_start_bound_doubles_up_to_eight_times_the_ready_timeout():
    bounds = [120.0]
    for _ in range(4):
        bounds.append(next_start_bound(bounds[-1], 120.0))
    assert bounds == [120.0, 240.0, 480.0, 960.0, 960.0]


def test_a_failed_start_is_tried_again_at_once_unless_one_failed_on_that_node_within_the_poll():
    assert retry_now(None, 100.0, 5.0)
    assert not retry_now(97.0, 100.0, 5.0)
    assert retry_now(95.0, 100.0, 5.0)


def test_a_failed_start_wakes_the_keeper_at_once_once_per_poll_per_node():
    p = Pool()
    p.table = table_of("A", "B")
    a1, b1 = p.spawn("A"), p.spawn("B")  # starting
    p.keeper.poll_s = 60.0  # no regular step within this test
    p.keeper.start()
    try:
        p.keeper.post(Post(a1, Event.START_FAILED, error=RuntimeError("no")))
        wait_until(lambda: p.flushes == 1, 10, "a keeper step right after the failed start")
        (a2,) = [m for m in p.members.members(State.STARTING) if m.node_id == "A"]  # its replacement
        p.keeper.post(Post(a2, Event.START_FAILED, error=RuntimeError("no")))  # again within the poll
        time.sleep(1.0)
        assert p.flushes == 1  # the next regular step tries it
        p.keeper.post(Post(b1, Event.START_FAILED, error=RuntimeError("no")))  # another node: at once
        wait_until(lambda: p.flushes == 2, 10, "a keeper step for the other node's failed start")
    finally:
        p.keeper.close()
    assert {a1.state, a2.state, b1.state} == {State.DEAD} and {a1, a2, b1} <= set(p.stopped)
    assert p.where(State.STARTING) == ["B"]  # A held off for the poll, B tried again


def test_the_retry_of_a_failed_start_counts_as_a_replacement_not_as_growth():
    p = Pool("A")
    (m,) = p.members.members()
    p.members.dead(m, lost=True)
    p.keeper.step()  # the replacement starts on A ...
    (starting,) = p.members.members(State.STARTING)
    p.members.dead(starting, lost=False, failed_start=True)  # ... and dies while it starts (counted there)
    p.keeper.step()  # tried again on A: the pool is where it was, not bigger
    s = p.members.stats.as_dict()
    assert (s["lost"], s["failed_starts"], s["replaced"], s["grown"]) == (1, 1, 2, 0)


def test_a_failed_start_is_counted_by_the_table_once_however_many_report_it():
    p = Pool("A")
    p.table = table_of("A", "B")
    p.keeper.step()
    (starting,) = p.members.members(State.STARTING)
    # the start's own callback and the keeper's bound may both see it fail: one failed start
    assert p.members.dead(starting, lost=False, failed_start=True)
    assert not p.members.dead(starting, lost=False, failed_start=True)
    assert p.members.stats.as_dict()["failed_starts"] == 1


def _fail_start_on(p, node_id):
    """The start on ``node_id`` dies before it is ready, as the pool reports it."""
    (starting,) = [m for m in p.members.members(State.STARTING) if m.node_id == node_id]
    p.keeper.post(Post(starting, Event.START_FAILED, error=RuntimeError("no CPU")))
    p.keeper.apply_posted()  # (the test's thread built the keeper: it applies the posts)


def test_a_node_that_refused_two_starts_within_the_poll_gets_none_until_the_poll_has_passed_whatever_wakes_the_keeper():
    p = Pool("A")  # poll_s 0.5; the keeper's thread is not started: each step below is one wake
    (m,) = p.members.members()
    p.members.dead(m, lost=True)
    p.keeper.step()  # the replacement starts on A ...
    _fail_start_on(p, "A")  # ... and dies: tried again at once
    p.keeper.step()
    _fail_start_on(p, "A")  # the second failure within the poll: A is held off
    t_held = time.monotonic()
    for _ in range(3):  # a held task, another node's actor ready, a loss elsewhere: each wakes the keeper
        p.keeper.step()
    assert p.where(State.STARTING) == [] and p.members.stats.as_dict()["failed_starts"] == 2
    assert p.members.usable == 1  # the lane still holds its tasks for the replacement to come
    assert 0 < p.keeper.next_look_s(time.monotonic()) <= 0.5  # the loop wakes when the hold-off ends
    time.sleep(max(0.0, t_held + 0.55 - time.monotonic()))
    p.keeper.step()
    assert p.where(State.STARTING) == ["A"]
    assert 0.4 < p.keeper.next_look_s(time.monotonic()) <= 0.5  # a poll after the last step


def test_a_held_off_node_leaves_the_other_nodes_starts_alone():
    p = Pool("A", "B")
    for m in p.members.members():
        p.members.dead(m, lost=True)
    p.keeper.step()  # replacements on A and B
    _fail_start_on(p, "A")
    p.keeper.step()
    _fail_start_on(p, "A")  # A held off
    _fail_start_on(p, "B")  # B's first failure: tried again at once
    p.keeper.step()
    assert p.where(State.STARTING) == ["B"] and p.keeper.held_off(time.monotonic()) == {"A"}


class RecordingMembers(Members):
    """A table that records which thread moved a member."""

    def __init__(self, stats):
        super().__init__(stats)
        self.movers = set()

    def on(self, m, event):
        moved = super().on(m, event)
        if moved:
            self.movers.add(threading.current_thread().name)
        return moved


def test_two_threads_posting_at_once_never_leave_the_table_inconsistent_and_only_the_keeper_moves_it(caplog):
    nodes = [chr(ord("A") + i) for i in range(6)]
    p = Pool()
    p.members = RecordingMembers(PoolStats())
    p.keeper.members = p.keeper.capacity._members = p.members
    p.table = table_of(*nodes)
    born = queue.SimpleQueue()  # the actors the keeper starts: one ready() answer each, as Ray gives

    def start_actor(nid):
        m = p.spawn(nid)
        born.put(m)
        return m

    p.start_actor = start_actor
    for nid in nodes:
        p.spawn(nid, initial=True)
    p.keeper.poll_s = 0.02  # steps (starts, drains, retirements) interleave with the posts
    p.keeper.start()
    rng_events = [Event.LOST, Event.UNREACHABLE, Event.DRAIN]
    wrong, stop = [], threading.Event()

    def callbacks(seed):  # Ray's callback thread: answers, deaths, unreachable actors
        rng = random.Random(seed)
        for first in p.members.members(State.STARTING):
            p.keeper.post(Post(first, Event.READY))
        while not stop.is_set():
            try:
                p.keeper.post(Post(born.get_nowait(), Event.READY))
            except queue.Empty:
                pass
            live = p.members.members()
            if live and rng.random() < 0.2:
                p.keeper.post(Post(rng.choice(live), rng.choice(rng_events)))

    def dispatcher(seed):  # the dispatcher's thread: picks and releases, posts an idle draining actor
        rng = random.Random(seed)
        while not stop.is_set():
            seq = rng.randrange(1000)
            m = p.members.pick(seq)
            if m is not None and p.members.release(m, seq):
                p.keeper.post(Post())

    threads = [threading.Thread(target=callbacks, args=(1,)), threading.Thread(target=dispatcher, args=(2,))]
    with caplog.at_level(logging.ERROR):
        for t in threads:
            t.start()
        deadline = time.monotonic() + 3.0
        try:
            while time.monotonic() < deadline:
                wrong += p.members.consistent()
                time.sleep(0.01)
        finally:
            stop.set()
            for t in threads:
                t.join(10)
            p.keeper.close()
    assert not any(t.is_alive() for t in threads)
    assert wrong == [] and p.members.consistent() == []
    assert p.members.movers == {"hybridload-test-keeper"}  # no other thread moved an actor
    assert p.members.stats.as_dict()["lost"] > 10  # the run did churn
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_a_post_the_lifecycle_refuses_is_logged_as_a_bug_and_the_posts_after_it_still_apply(caplog):
    p = Pool("A", "B")
    a, b = p.members.members()
    answers = []
    p.keeper.post(Post(a, Event.READY, then=answers.append))  # READY twice: no report can make it
    p.keeper.post(Post(b, Event.LOST, then=answers.append))
    with caplog.at_level(logging.ERROR):
        assert p.keeper.apply_posted()  # the loss asks for a step
    (bug,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "BUG" in bug.getMessage() and "'ready' in state READY" in bug.getMessage()
    assert a.state is State.READY and b.state is State.DEAD and p.stopped == [b]
    assert answers == [False, True]


def test_a_lost_actor_s_task_report_goes_out_only_once_the_actor_is_out_of_the_pick():
    p = Pool("A", "B")
    a, _b = p.members.members()
    seen = []
    p.keeper.post(Post(a, Event.LOST, then=lambda moved: seen.append((moved, a.state, p.members.pick(0)))))
    assert seen == []  # posted, not applied: the report waits for the keeper
    p.keeper.apply_posted()
    ((moved, state, picked),) = seen
    assert moved and state is State.DEAD and picked is not a and picked.node_id == "B"


def test_a_post_after_the_keeper_closed_is_answered_at_once_and_changes_nothing():
    p = Pool("A")
    (a,) = p.members.members()
    answers = []
    p.keeper.post(Post(a, Event.LOST, then=answers.append))
    p.keeper.close()  # left in the inbox: answered
    p.keeper.post(Post(a, Event.LOST, then=answers.append))  # after: answered on the poster's thread
    assert answers == [False, False] and a.state is State.READY


def test_a_start_that_answers_while_the_keeper_reads_the_node_table_is_not_stopped_for_its_bound():
    p = Pool("A")
    p.keeper.ready_timeout_s = 0.0  # every start is past its bound at the next step
    p.table = table_of("A", "B")
    p.keeper.step()
    (starting,) = p.members.members(State.STARTING)
    read = p.keeper._table

    def read_while_it_answers():
        out = read()
        p.keeper.post(Post(starting, Event.READY))  # its ready() answers on Ray's thread meanwhile
        return out

    p.keeper._table = read_while_it_answers
    p.keeper.step()
    assert starting.state is State.READY and starting not in p.stopped
    assert p.members.stats.as_dict()["failed_starts"] == 0
