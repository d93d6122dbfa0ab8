"""The chaos soak (tools/soak/soak.py) at CI size: fixed seeds, faults at drawn moments (the
trainer SIGKILLed and resumed on another world size, a process-lane worker SIGKILLed, the S3
server stopped, a GPU-lane device fault; Ray actors and nodes in the slow tier), and what the job
trained on equals an uninterrupted run, nothing left behind. And the soak's own comparison fails
on a doctored record, its schedule is a function of the seed."""

import copy
import importlib
import sys
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parent.parent / "tools" / "soak"


@pytest.fixture(scope="module")
def soak():
    sys.path.insert(0, str(SOAK))  # the soak runs as `python tools/soak/soak.py`
    try:
        yield importlib.import_module("soak")
    finally:
        sys.path.remove(str(SOAK))


@pytest.fixture(scope="module")
def tiny(soak, tmp_path_factory):
    """16 small photos: (paths, labels)."""
    world = importlib.import_module("_soak_world")
    paths, labels = world.tiny_photos(tmp_path_factory.mktemp("soak-photos"), 16)
    return [str(p) for p in paths], labels


def test_the_soak_schedule_is_a_function_of_the_seed_and_reaches_every_fault_kind(soak):
    faults = importlib.import_module("_soak_faults")
    assert faults.draw_schedule(5, 20) == faults.draw_schedule(5, 20)
    assert faults.draw_schedule(5, 20) != faults.draw_schedule(6, 20)
    seen = set()
    for seed in range(10):
        lives = faults.draw_schedule(seed, 20)
        assert sum(len(life["faults"]) for life in lives) == 20
        assert all(life["faults"][-1]["kind"] == "trainer_kill" for life in lives[:-1])  # a life ends in a kill
        for life in lives:
            for f in life["faults"]:
                assert faults.NEEDS.get(f["kind"], life["lanes"]) == life["lanes"], (f, life["lanes"])
                seen.add(f["kind"])
    assert seen == set(faults.KINDS)
    with pytest.raises(ValueError, match="unknown fault kinds"):
        faults.draw_schedule(0, 3, kinds=("meteor",))


def test_the_soak_s_depth_counts_each_fault_s_landing_steps_and_no_replay_after_a_kill(soak):
    """The job must outlast its schedule: each fault counts its gap, the steps the job may train
    while the driver sleeps its delay (one per ``step_s`` at most), the batches in flight it
    trains on while a stopped server or an armed GPU fault is waited out, and the step its
    recovery waits for. A trainer kill's replay restarts the step count at the checkpoint, so it
    takes no steps: a schedule of two lives needs what its lives need apart."""
    faults = importlib.import_module("_soak_faults")
    outage = {"kind": "storage_stopped", "gap": 3, "delay": 0.2, "seconds": 2.7}
    kill = {"kind": "trainer_kill", "gap": 2, "delay": 0.02}
    worker = {"kind": "worker_kill", "gap": 1, "delay": 0.26}
    assert faults.landing_steps(outage, 0.05, window=3) == 4 + 3 + 1
    assert faults.landing_steps(kill, 0.05, window=3) == 1 + 1
    assert faults.landing_steps(worker, 0.05, window=3) == 6 + 1
    assert faults.landing_steps(worker, 0.01, window=3) == 26 + 1  # a faster step: more steps per delay
    first = {"lanes": "gpu", "world": 2, "faults": [outage, kill]}
    second = {"lanes": "processes", "world": 1, "faults": [worker]}
    assert faults.steps_needed([first], 0.05, 3) == 2 + (3 + 8) + (2 + 2)
    assert faults.steps_needed([first, second], 0.05, 3) == (
        faults.steps_needed([first], 0.05, 3) + faults.steps_needed([second], 0.05, 3)
    )
    # 16 samples at 3 ranks: 2 steps an epoch; 17 + 10 steps, then the epoch of rounding
    assert soak.epochs_for([first, second], 16, 0.05) == 14 + 1


def test_the_soak_comparison_fails_on_a_dropped_duplicated_reordered_or_changed_sample(soak, tiny):
    check = importlib.import_module("_soak_check")
    paths, labels = tiny
    # 2 ranks (2 steps an epoch), 3 from step 3 (mid epoch 1), 1 from step 4 (epoch 2)
    segments = [[0, 2, 0], [3, 3, 1], [4, 1, 2]]
    want = check.reference(paths, labels, seed=4, epochs=3, segments=segments)
    assert check.compare(copy.deepcopy(want), want, num_samples=16) == []
    assert {r[0] for r in want} == {0, 1, 2} and {r[1] for r in want} == {0, 1, 2}
    for epoch in (0, 1, 2):  # the reference itself: every sample each epoch
        assert {r[4] for r in want if r[0] == epoch} == set(range(16))

    dropped = copy.deepcopy(want)
    del dropped[5]
    assert any("indices differ" in p for p in check.compare(dropped, want, num_samples=16))
    duplicated = copy.deepcopy(want)
    duplicated.insert(6, list(duplicated[5]))
    assert any("indices differ" in p for p in check.compare(duplicated, want, num_samples=16))
    swapped = copy.deepcopy(want)
    swapped[1], swapped[2] = swapped[2], swapped[1]
    assert any("indices differ" in p for p in check.compare(swapped, want, num_samples=16))
    changed = copy.deepcopy(want)
    changed[7][6] = "0" * 32
    assert any("pixels differ" in p for p in check.compare(changed, want, num_samples=16))
    relabeled = copy.deepcopy(want)
    relabeled[3][5] += 1
    assert any("label" in p for p in check.compare(relabeled, want, num_samples=16))
    # a GPU-engine row: pixels within the tolerance pass, beyond it fail
    near, far = copy.deepcopy(want), copy.deepcopy(want)
    for rows, delta in ((near, check.THUMB_TOLERANCE), (far, check.THUMB_TOLERANCE + 1)):
        rows[4][6] = "f" * 32
        rows[4][7] = [min(255, v + delta) if v + delta <= 255 else v - delta for v in rows[4][7]]
        rows[4].append(True)
    assert check.compare(near, want, num_samples=16) == []
    assert any("pixels differ" in p for p in check.compare(far, want, num_samples=16))


def _run_soak(tmp_path, seed, faults, kinds, worlds="1,2", samples=16, deadline_s=300) -> dict:
    """The soak as users run it: ``python tools/soak/soak.py`` in a process of its own, so its
    leak check watches only its own descendants and its Ray is its own (this test session may hold
    a Ray cluster of its own, alive until the session ends); its ``--json`` result."""
    import json
    import subprocess

    out = tmp_path / "result.json"
    cmd = [sys.executable, str(SOAK / "soak.py"), "--seed", str(seed), "--faults", str(faults)]
    cmd += ["--samples", str(samples), "--deadline-s", str(deadline_s), "--step-s", "0.03", "--save-every", "3"]
    cmd += ["--kinds", ",".join(kinds), "--worlds", worlds, "--json", str(out), "--data", str(tmp_path / "photos")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=deadline_s + 120)
    assert out.exists(), (
        f"the soak wrote no result (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
    return json.loads(out.read_text())


@pytest.mark.slow  # 20-80 s here (make test runs it; make test-fast does not)
def test_a_soak_of_kills_outages_and_device_faults_trains_on_the_uninterrupted_stream(tmp_path):
    kinds = ("trainer_kill", "worker_kill", "storage_stopped", "gpu_fault")
    # seed 713: the GPU lane on 2 ranks (S3 stopped, a device fault), killed, resumed on 1 rank's worker processes
    result = _run_soak(tmp_path, 713, 4, kinds)
    assert result["problems"] == []
    assert result["counts"] == {kind: 1 for kind in kinds}, result["events"]
    assert result["processes_seen"] >= 4 and result["shm_seen"] >= 1  # the leak check watched something
    # it stopped a few epochs after its last fault, well before its guard (the bound takes about
    # 3x the steps a schedule needs where a step takes 0.1 s against --step-s 0.03)
    assert result["epochs"] < result["max_epochs"], result


def test_the_soak_reads_file_descriptor_growth_over_the_epochs_after_the_last_fault_is_over(soak):
    """A trainer's fds may step up with a fault's churn (a Ray node added, an actor replaced),
    then must stay flat: growth counts from its first epoch end after the last fault's
    recovery (or its pool's, when longer); a life with fewer than two such ends is not read."""
    check = importlib.import_module("_soak_check")
    events = [
        {"kind": "node_added", "at": 100.0, "recovery_s": 0.5},
        {"kind": "actor_kill", "at": 110.0, "recovery_s": 0.4, "pool_recovery_s": 6.0},
        {"kind": "worker_kill", "at": 90.0, "recovery_s": 1.0, "pool_recovery_s": None},
    ]
    assert check.calm_since(events) == 116.0 and check.calm_since([]) == 0.0
    churn = [[55, 9000, 99.0], [56, 9000, 105.0], [58, 9000, 115.0], [58, 9100, 120.0], [58, 9000, 130.0]]
    assert check.fd_growth([churn], check.calm_since(events)) == 0  # 55 -> 58 during the faults
    leak = churn + [[59, 9000, 140.0], [61, 9000, 150.0]]
    assert check.fd_growth([churn, leak], check.calm_since(events)) == 3  # 58 -> 61 once calm
    killed = [[50, 9000, 99.0], [70, 9000, 117.0]]  # a life with one epoch end after the faults
    assert check.fd_growth([killed], check.calm_since(events)) == 0
    assert check.fd_growth([leak], calm=0.0) == 6  # no fault: from the first epoch end


def test_the_soak_leak_check_names_a_process_and_a_segment_left_behind(soak):
    import subprocess
    from multiprocessing import shared_memory

    check, world = importlib.import_module("_soak_check"), importlib.import_module("_soak_world")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    seg = shared_memory.SharedMemory(create=True, size=16)
    try:
        left = check.leftovers({proc.pid: world.start_time(proc.pid)}, {f"/dev/shm/{seg.name}"}, grace_s=0)
        assert any(f"process {proc.pid} still alive" in x for x in left)
        assert any(seg.name in x and "still in /dev/shm" in x for x in left)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        seg.close()
        seg.unlink()
    assert check.leftovers({proc.pid: world.start_time(proc.pid) or 1}, {f"/dev/shm/{seg.name}"}, grace_s=0) == []


@pytest.mark.slow  # about 2 minutes here
def test_a_soak_of_actor_kills_and_node_churn_trains_on_the_uninterrupted_stream(tmp_path):
    kinds = ("actor_kill", "actor_kill_starting", "node_removed", "node_added")
    # seed 14: actors killed while the job starts, a node removed, two added, an actor killed
    # 48 samples: passes long enough for the pool to start its actors
    result = _run_soak(tmp_path, 14, 5, kinds, samples=48, deadline_s=400)
    assert result["problems"] == []
    # an actor kill finds an actor only once the job's pool made one (on a loaded machine it may find
    # none, and is not counted); the nodes are always there to remove and add
    assert {"node_removed", "node_added"} <= set(result["counts"]), result


def test_a_resumed_job_without_a_first_step_time_is_a_problem_of_the_run_not_a_recovery_timed_now(soak, tmp_path):
    """The faults before a resumed job recover at the first step time its trainer writes
    (``t_first``); a progress without it fails the run, naming the fault, instead of timing the
    recovery at the moment the soak looked. With it, the fault is timed from that time."""
    import json
    import time

    run = importlib.import_module("_soak_run")
    driver = run.Driver(
        tmp_path, seed=1, epochs=1, paths=[], labels=[], storage=None, cluster=None, deadline=float("inf")
    )
    progress = tmp_path / "progress-0.json"
    progress.write_text(json.dumps({"step": 6, "pid": 1, "status": []}))
    driver.pending.append(("trainer_kill", "SIGKILL trainer pid 7", time.time() - 5.0))
    driver.settle("processes", 1)
    assert driver.events == [] and driver.pending == []
    assert len(driver.problems) == 1 and "SIGKILL trainer pid 7" in driver.problems[0]
    assert "t_first" in driver.problems[0]

    progress.write_text(json.dumps({"step": 6, "pid": 1, "status": [], "t_first": 102.5}))
    driver.pending.append(("trainer_kill", "SIGKILL trainer pid 8", 100.0))
    driver.settle("processes", 1)
    assert [(e["kind"], e["recovery_s"]) for e in driver.events] == [("trainer_kill", 2.5)]
    assert len(driver.problems) == 1


def test_the_soak_times_a_ray_pool_back_at_its_target_only_after_it_noticed_the_kill(soak, tmp_path):
    """An actor kill is timed once every rank's pool has counted the loss (lost actors and failed
    starts above the count before the kill) and is back at its target; one the pools never
    noticed before the life ended is not timed (None)."""
    import json
    import time

    pools = importlib.import_module("_soak_pools")
    watch = pools.PoolWatch(tmp_path)
    progress = tmp_path / "progress-0.json"
    pool = {"live": 1, "target": 2, "without_actors_s": 1.5, "lost": 1, "failed_starts": 0}
    progress.write_text(json.dumps({"step": 3, "pool": pool}))
    first, second = {"kind": "actor_kill"}, {"kind": "actor_kill"}
    watch.opened(first, 0, time.time() - 2.0)
    watch.opened(second, pools.losses(watch.pools()), time.time())
    watch.watch(ranks=1)
    assert watch.open_kills and "pool_recovery_s" not in first  # one actor short of the target
    progress.write_text(json.dumps({"step": 4, "pool": dict(pool, live=2)}))
    watch.watch(ranks=2)
    assert "pool_recovery_s" not in first  # the second rank's pool not read yet
    watch.watch(ranks=1)
    assert first["pool_recovery_s"] >= 2.0  # noticed (1 lost > 0) and back
    assert "pool_recovery_s" not in second  # no loss counted since the second kill
    watch.keep(ranks=1)  # the life ends
    assert second["pool_recovery_s"] is None and watch.open_kills == []
    assert watch.empty_s == [0.0]  # one actor short, never none: no time without a ready actor


#: recorded readings, per rank's pool: (seconds, target, live ready actors); rank 0 has a slot
#: throughout and loses its only actor at 10 s; rank 1 has no slot (target 0) until 20 s.
READINGS = {
    0: [(0.0, 1, 1), (10.0, 1, 0), (16.0, 1, 1), (20.0, 1, 1), (24.0, 1, 1), (30.0, 1, 1)],
    1: [(0.0, 0, 0), (10.0, 0, 0), (16.0, 0, 0), (20.0, 1, 0), (24.0, 1, 1), (30.0, 1, 1)],
}


def test_a_pool_at_target_0_is_reported_apart_and_does_not_hold_back_a_kill_timed_on_the_pools_with_a_target(
    soak, tmp_path, monkeypatch
):
    """A pool is back when live >= its target; a kill is timed on the pools whose target is above
    0, so a rank with no slot does not keep it open; its time at target 0 is counted apart, not
    as time without a ready actor (the pool's own ``without_actors_s`` mixes both)."""
    import json

    pools = importlib.import_module("_soak_pools")
    clock = [0.0]
    monkeypatch.setattr(pools.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(pools.time, "time", lambda: 1000.0 + clock[0])
    watch = pools.PoolWatch(tmp_path)
    kill = {"kind": "actor_kill"}
    for i, (t, _, _) in enumerate(READINGS[0]):
        clock[0] = t
        for rank, rows in READINGS.items():
            _, target, live = rows[i]
            empty = min(max(t - 10.0, 0.0), 6.0) if rank == 0 else min(t, 24.0)  # as the pool counts it
            pool = {"live": live, "target": target, "without_actors_s": empty, "lost": int(rank == 0 and t >= 10)}
            (tmp_path / f"progress-{rank}.json").write_text(json.dumps({"pool": dict(pool, failed_starts=0)}))
        if i == 1:
            watch.opened(kill, 0, 1000.0 + t)
        watch.watch(ranks=2)
        if i == 2:  # rank 0 back at its target at 16 s while rank 1 has no slot: timed
            assert kill.get("pool_recovery_s") == 6.0
    watch.keep(ranks=2)
    assert watch.empty_s == [6.0, 4.0] and watch.zero_target_s == [0.0, 20.0]
    assert pools.pool_times(READINGS[1]) == (4.0, 20.0)  # target 1 from 20 s, its actor ready at 24 s
    assert not pools.back([{"target": 0, "live": 0}])  # no pool with a slot: nothing back to time
    line = soak.pool_summary([{"events": [kill], "pool_without_actors_s": [6.0, 4.0], "pool_zero_target_s": [20.0]}])
    assert "without a ready actor 10.0 s" in line and "at target 0 (no slot for the rank) 20.0 s" in line


def test_an_actor_kill_is_timed_on_the_pool_of_the_rank_it_hit_not_held_open_by_another_rank_s_kill(soak, tmp_path):
    """The killed actor's rank is read from Ray's log file names (its worker's job, that job's
    driver: the rank's trainer), and the kill is timed once that rank's pool noticed it and is
    back at its target: a later kill on another rank's pool, still starting its replacement,
    does not add its start to this kill's time."""
    import json
    import time

    pools, world = importlib.import_module("_soak_pools"), importlib.import_module("_soak_world")
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in (
        "worker-1748fca8-01000000-4152.out",
        "worker-28a35982-02000000-4357.out",
        "worker-dec54cae-ffffffff-3227.out",
        "python-core-driver-01000000ffffffff_2695.log",
        "python-core-driver-02000000ffffffff_2696.log",
    ):
        (logs / name).write_text(":job_id:\n")
    assert [world.owner_pid(logs, pid) for pid in (4152, 4357, 3227, 999)] == [2695, 2696, None, None]

    run = tmp_path / "run"
    run.mkdir()

    def write(rank: int, live: int, lost: int) -> None:
        pool = {"live": live, "target": 1, "without_actors_s": 0.0, "lost": lost, "failed_starts": 0}
        (run / pools.progress_file(rank)).write_text(json.dumps({"pool": pool}))

    write(0, 1, 0)
    write(1, 1, 0)
    watch = pools.PoolWatch(run)
    first, second = {"kind": "actor_kill"}, {"kind": "actor_kill"}
    watch.opened(first, watch.losses_now(), time.time(), rank=0)
    write(0, 0, 1)
    watch.opened(second, watch.losses_now(), time.time(), rank=1)
    write(1, 0, 1)
    watch.watch(ranks=2)
    assert "pool_recovery_s" not in first and "pool_recovery_s" not in second
    write(0, 1, 1)  # rank 0's replacement ready, rank 1's still starting
    watch.watch(ranks=2)
    assert first["pool_recovery_s"] >= 0 and "pool_recovery_s" not in second
    write(1, 1, 1)
    watch.watch(ranks=2)
    assert second["pool_recovery_s"] >= 0 and watch.open_kills == []


def test_a_node_whose_start_ray_gives_up_on_is_a_fault_not_counted_not_the_end_of_the_soak(soak, caplog):
    """On a loaded machine Ray may give up on a worker node's start (its raylet not registered
    within 30 s: a bare Exception); the soak logs it and does not count the fault, the job goes on."""
    import random

    faults, world = importlib.import_module("_soak_faults"), importlib.import_module("_soak_world")

    class Cluster:
        workers: list = []

        def add(self):
            raise world.NodeStartFailed("a Ray worker node did not start: The current node timed out during startup")

    for kind in ("node_added", "node_removed"):
        what = faults.inject(kind, {}, rng=random.Random(0), trainers=[], run_dir=None, cluster=Cluster(), storage=None)
        assert what == ""
    assert "timed out during startup; the fault is not counted" in caplog.text


def test_what_a_failed_ray_start_left_running_is_ended_and_reaped_not_left_a_zombie_the_leak_check_reads_alive(soak):
    """A Ray start that times out on a loaded machine leaves its processes, children of the
    soak, without a handle to wait on them: ended and reaped, the leak check finds nothing."""
    import subprocess

    check, world = importlib.import_module("_soak_check"), importlib.import_module("_soak_world")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    seen = {proc.pid: world.start_time(proc.pid)}
    world.end_leftover(proc.pid)
    assert check.leftovers(seen, set(), grace_s=0) == []
    proc.returncode = -9  # (reaped above: Popen's own wait would find no child)


def test_the_soak_asks_its_job_to_stop_epoch_ends_after_the_last_fault_and_later_when_a_pool_comes_back(soak):
    """The driver asks the job to stop ``ENDS_AFTER_CALM`` epoch ends after the one rank 0
    reaches next once the last fault is over (the fd check reads >= 2 ends after it); while a
    Ray pool is not back from an actor kill it waits (up to ``POOL_WAIT_S``), and a pool back
    after the ask moves the stop later, never earlier."""
    stop = importlib.import_module("_soak_stop")
    ends = stop.ENDS_AFTER_CALM
    assert ends >= 3  # >= 2 ends after the last fault even when the progress read lags an epoch
    ask = stop.StopAsk()
    assert ask.update(-1, open_kills=0, waited_s=0.0) is None  # no step yet: no epoch to count from
    assert ask.update(4, open_kills=0, waited_s=0.0) == 4 + ends - 1
    assert ask.update(6, open_kills=0, waited_s=1.0) is None  # asked once: the job keeps it
    assert ask.asked == 4 + ends - 1

    pools = stop.StopAsk()
    assert pools.update(4, open_kills=2, waited_s=1.0) is None  # the pools not back yet
    assert pools.update(9, open_kills=2, waited_s=stop.POOL_WAIT_S) == 9 + ends - 1  # waited long enough
    assert pools.update(10, open_kills=2, waited_s=stop.POOL_WAIT_S + 1) is None
    assert pools.update(12, open_kills=1, waited_s=stop.POOL_WAIT_S + 2) == 12 + ends - 1  # one came back
    assert pools.update(13, open_kills=1, waited_s=stop.POOL_WAIT_S + 3) is None
    back = stop.StopAsk()
    back.update(9, open_kills=1, waited_s=stop.POOL_WAIT_S)
    assert back.update(9, open_kills=0, waited_s=stop.POOL_WAIT_S) is None  # never the same or an earlier epoch
    assert back.asked == 9 + ends - 1


def test_a_longer_pool_wait_keeps_the_job_training_that_long_for_a_pool_not_back_and_its_bound_grows_with_it(soak):
    """``--pool-wait-s``: the job is not asked to stop while a pool is not back from a kill for
    that long, and the job's epoch bound grows by the steps the wait takes (each step sleeps
    ``step_s``), so the bound cannot end the job before the wait does; the default is unchanged."""
    stop = importlib.import_module("_soak_stop")
    ask = stop.StopAsk(pool_wait_s=60.0)
    assert ask.update(4, open_kills=1, waited_s=stop.POOL_WAIT_S + 1) is None
    assert ask.update(30, open_kills=1, waited_s=59.0) is None
    assert ask.update(31, open_kills=1, waited_s=60.0) == 31 + stop.ENDS_AFTER_CALM - 1
    assert stop.StopAsk(pool_wait_s=60.0).update(4, open_kills=0, waited_s=0.0) is not None  # pools back
    lives = [{"lanes": "ray", "world": 2, "faults": [{"kind": "actor_kill", "gap": 2, "delay": 0.1}]}]
    default = soak.epochs_for(lives, 48, 0.05)
    assert soak.epochs_for(lives, 48, 0.05, stop.POOL_WAIT_S) == default
    per_epoch = 4  # 48 samples over 3 ranks in batches of 4
    assert soak.epochs_for(lives, 48, 0.05, 60.0) * per_epoch * 0.05 >= 60.0 - stop.POOL_WAIT_S
    assert soak.parse(["--pool-wait-s", "60"]).pool_wait_s == 60.0
    with pytest.raises(SystemExit):
        soak.parse(["--pool-wait-s", "-1"])


def test_the_soak_s_cluster_runs_its_workers_at_the_trainer_s_priority_as_the_embedded_cluster_unless_told_ray_s(soak):
    """The soak models a user's job on hybridload's embedded cluster, which starts Ray with
    ``RAY_worker_niceness=0`` unless the user set it; ``--ray-default-niceness`` runs Ray's own
    default (15) to show the difference."""
    world = importlib.import_module("_soak_world")
    assert world.worker_niceness({}, ray_default=False) == "0"
    assert world.worker_niceness({"RAY_worker_niceness": "7"}, ray_default=False) == "7"
    assert world.worker_niceness({"RAY_worker_niceness": "0"}, ray_default=True) is None
    assert soak.parse([]).ray_default_niceness is False
    assert soak.parse(["--ray-default-niceness"]).ray_default_niceness is True


def _creation_events(actor_id: bytes, name: str, registered: float, running: float | None, created: float | None):
    """Ray's task events (``gcs_pb2.TaskEvents``) of an actor's creation task and its ``ready()``."""
    from ray.core.generated import common_pb2, gcs_pb2

    def event(kind: str, task_name: str, states: dict) -> object:
        e = gcs_pb2.TaskEvents()
        e.task_info.type = common_pb2.TaskType.Value(kind)
        e.task_info.name = task_name
        e.task_info.actor_id = actor_id
        for status, t in states.items():
            if t is not None:
                e.state_updates.state_ts_ns[common_pb2.TaskStatus.Value(status)] = int(t * 1e9)
        return e

    states = {"PENDING_ARGS_AVAIL": registered, "RUNNING": running, "FINISHED": created}
    ready = {"PENDING_ARGS_AVAIL": registered, "FINISHED": None if created is None else created + 0.2}
    return [event("ACTOR_CREATION_TASK", f"{name}:Worker.__init__", states), event("ACTOR_TASK", "Worker.ready", ready)]


def test_each_actor_kill_is_given_its_replacement_s_start_in_ray_s_own_timings(soak, tmp_path):
    """The soak reads every hybridload actor's start from Ray's actor table, task events and the
    worker's log (asked, worker up, leased and running, created, ready), and gives each actor
    kill the steps of its pool's next start after it, in seconds from the kill; a replacement
    that never finished reads None from the step it did not reach."""
    world, pools = importlib.import_module("_soak_world"), importlib.import_module("_soak_pools")
    pool, other = "hybridload-11-r0-aaaa1111", "hybridload-12-r1-bbbb2222"
    actors = {
        "01": {"Name": f"{pool}-0", "Pid": 501, "EndTime": 110_000},  # killed at 110 s
        "02": {"Name": f"{pool}-1", "Pid": 502, "EndTime": 0},  # its replacement
        "03": {"Name": f"{other}-0", "Pid": 503, "EndTime": 0},  # another rank's pool
        "04": {"Name": f"{pool}-2", "Pid": 0, "EndTime": 200_000},  # a second kill's replacement, never created
        "05": {"Name": "someone-else", "Pid": 505, "EndTime": 0},
    }
    events = _creation_events(bytes.fromhex("01"), f"{pool}-0", 100.0, 101.0, 105.0)
    events += _creation_events(bytes.fromhex("02"), f"{pool}-1", 110.2, 113.0, 118.5)
    events += _creation_events(bytes.fromhex("03"), f"{other}-0", 110.1, 112.0, 117.0)
    events += _creation_events(bytes.fromhex("04"), f"{pool}-2", 150.3, None, None)
    (tmp_path / "python-core-worker-beef_502.log").write_text(
        "[2026-11-29 08:13:54,387 I 502 502] core_worker_process.cc:872: Constructing CoreWorkerProcess. pid: 502\n"
    )
    starts = world.actor_starts_from(actors, events, tmp_path)
    assert {s["name"] for s in starts} == {f"{pool}-0", f"{pool}-1", f"{other}-0", f"{pool}-2"}
    replacement = next(s for s in starts if s["name"] == f"{pool}-1")
    assert replacement["asked"] == 110.2 and replacement["running"] == 113.0 and replacement["created"] == 118.5
    assert replacement["ready"] == pytest.approx(118.7)
    from datetime import datetime

    assert replacement["worker"] == datetime(2026, 11, 29, 8, 13, 54, 387000).timestamp()
    assert next(s for s in starts if s["name"] == f"{pool}-0")["died"] == 110.0

    kills = [
        {"kind": "actor_kill", "what": "SIGKILL actor pid 501 (ray::Worker.run)", "at": 110.0},
        {"kind": "actor_kill", "what": "SIGKILL actor pid 502 (ray::Worker.run)", "at": 150.0},
        {"kind": "actor_kill", "what": "SIGKILL actor pid 999 (ray::Worker.run)", "at": 160.0},
        {"kind": "node_added", "what": "node added (3 worker nodes)", "at": 120.0},
    ]
    pools.ray_steps(kills, starts)
    first = kills[0]["ray_steps"]
    assert first["actor"] == f"{pool}-1"  # the same pool's next start, not the other rank's earlier one
    assert [first[k] for k in ("dead", "asked", "running", "created")] == pytest.approx([0.0, 0.2, 3.0, 8.5])
    assert first["ready"] == pytest.approx(8.7)
    assert kills[1]["ray_steps"]["actor"] == f"{pool}-2" and kills[1]["ray_steps"]["created"] is None
    assert kills[2]["ray_steps"] is None and "ray_steps" not in kills[3]  # no such actor; not a kill
    kills[0]["pool_recovery_s"], kills[1]["pool_recovery_s"] = 9.1, None
    lines = soak.kill_lines(kills)
    assert "pool back at its target 9.10 s" in lines[0] and "created 8.50" in lines[0]
    assert "created -" in lines[1] and len(lines) == 2
    summary = soak.ray_summary([{"events": kills}])
    assert "after 2 actor kills" in summary and "created 8.50 / 8.50 (1 not reached)" in summary


def _stop_rank(rank: int, port: int, runs: list[str], out: str) -> None:
    """A soak trainer's epoch loop on 2 gloo ranks: an all-reduce per step, the agreed stop at
    each epoch's start; rank 1 is given an empty run folder, so it stops only on rank 0's word."""
    import json
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(SOAK))
    from _soak_stop import agreed_stop

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=30)
    )
    epoch = 0
    while epoch < 50 and not agreed_stop(Path(runs[rank]), epoch, rank, dist):
        for _ in range(3):
            dist.all_reduce(torch.ones(4))
        epoch += 1
    dist.destroy_process_group()
    Path(out, f"rank-{rank}.json").write_text(json.dumps({"trained": epoch}))


def test_every_rank_stops_at_the_epoch_end_rank_0_read_in_the_stop_file_and_a_resumed_job_reads_it_again(
    soak, tmp_path
):
    import json

    from support.streams import free_port, run_ranks

    stop = importlib.import_module("_soak_stop")
    run, elsewhere = tmp_path / "run", tmp_path / "rank-1-sees-no-file"
    run.mkdir()
    elsewhere.mkdir()
    assert stop.requested(run) is None and not stop.agreed_stop(run, 7, 0, None)
    stop.request_stop(run, 3)  # train epochs 0..3
    assert stop.requested(run) == 3  # what a job resumed after a kill reads, the same way
    assert [stop.agreed_stop(run, e, 0, None) for e in (0, 3, 4, 5)] == [False, False, True, True]  # one rank
    assert not stop.agreed_stop(elsewhere, 4, 0, None)

    port = free_port()
    codes = run_ranks(_stop_rank, lambda r: (r, port, [str(run), str(elsewhere)], str(tmp_path)), 2, timeout_s=120)
    assert codes == [0, 0]  # rank 1 left its loop with rank 0: none waited in an all-reduce alone
    assert [json.loads((tmp_path / f"rank-{r}.json").read_text())["trained"] for r in (0, 1)] == [4, 4]
