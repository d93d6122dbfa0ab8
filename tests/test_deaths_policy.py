"""When the Ray lane blames a batch for the workers it killed (`deaths.blamed`), on recorded
(pid, signal in the worker's log) readings, and `Deaths` on Ray's death texts. No Ray starts
here (the real kills: tests/test_worker_kills.py)."""

import re

import pytest

from hybridload.errors import WorkerLost
from hybridload.lanes._ray import deaths
from hybridload.lanes._ray.deaths import CRASH_SIGNALS, DEATHS_TO_FAIL, Deaths, blamed

#: Ray 2.60's ActorDiedError text for an actor process SIGKILLed (recorded here; ids shortened)
KILLED = (
    "The actor died unexpectedly before finishing this task.\n\tclass_name: W\n\tactor_id: 5ce7a148\n"
    "\tpid: {pid}\n\tname: hybridload-rec\n\tnamespace: ab728e03\n\tip: 127.0.0.1\n"
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
    "detail: Worker unexpectedly exits with a connection error code 2. End of file. Some common causes "
    "include: (1) the process was killed by the OOM killer due to high memory usage, (2) ray stop --force "
    "was called, or (3) the worker crashed unexpectedly due to SIGSEGV or another unexpected error."
)
#: a memory monitor kill, put together from Ray 2.60's raylet format strings ("Memory on the node
#: (IP: %s, ID: %s) was ...", "... pid=%d, actual memory used=%sGB, worker ID=%s)"): not recorded
OOM = (
    "The actor is dead because its worker process has died. Worker exit type: USER_ERROR Worker exit detail: "
    "1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 10.0.0.7, ID: "
    "9c2e) was 0.99GB used / 1.00GB limit (0.990000) (job ID=01000000, lease ID=ab12, task name=Worker.run, "
    "required resources={{CPU: 1}}, pid={pid}, actual memory used=0.96GB, worker ID=7f3a)"
)


class Died(Exception):
    """What Ray's callback hands the pool: only its text is read."""


def test_two_deaths_with_no_crash_signal_do_not_blame_the_batch():
    # two outside SIGKILLs a second apart may hit the two actors holding one batch: not its doing
    assert not blamed([("101", None), ("102", None)])
    assert not blamed([("101", None), ("102", None), ("103", None)])
    assert blamed([("101", None), ("102", None), ("103", None), ("104", None)])


@pytest.mark.parametrize("sig", sorted(CRASH_SIGNALS))
def test_two_crash_signals_blame_the_batch_one_does_not(sig):
    assert not blamed([("101", sig)])
    assert not blamed([("101", sig), ("102", None)])  # an unrelated kill beside one crash
    assert blamed([("101", sig), ("102", sig)])
    assert blamed([("101", sig), ("102", None), ("103", "SIGSEGV")])


def test_an_outside_sigterm_or_sigint_in_the_log_is_no_crash():
    outside = [("101", "SIGTERM"), ("102", "SIGINT"), ("103", "SIGTERM")]  # a `kill`, `ray stop`
    assert not blamed(outside)
    assert blamed(outside + [("104", None)])  # counted as deaths all the same


def test_no_deaths_blame_nothing():
    assert not blamed([])


def test_the_pid_and_node_are_read_from_a_death_and_from_the_memory_monitors_text():
    assert deaths._field(KILLED.format(pid=4242), "pid") == "4242"
    assert deaths._field(KILLED.format(pid=4242), "ip") == "127.0.0.1"
    assert deaths._field(OOM.format(pid=4343), "pid") == "4343"
    assert deaths._field(OOM.format(pid=4343), "ip") == "10.0.0.7"
    assert deaths.process_died(Died(KILLED)) and deaths.process_died(Died(OOM))


def test_silent_deaths_are_handed_on_until_the_fourth_which_names_every_pid_in_torchs_words():
    book = Deaths("ray")
    key = (0, 5, 7)  # (epoch, seq, seed)
    texts = [KILLED.format(pid=501), OOM.format(pid=502), KILLED.format(pid=503), KILLED.format(pid=504)]
    said = [book.lost(key, 5, i % 2, Died(t)) for i, t in enumerate(texts[:3])]
    again = book.lost(key, 5, 0, Died(texts[2]))  # the same worker's death reaching a second copy of the batch
    assert not any(e.batch_at_fault for e in said + [again])
    assert "the batch goes to another worker" in str(said[0])
    assert re.match(r"DataLoader worker \(pid 501\) exited unexpectedly", str(said[0]))
    last = book.lost(key, 5, 1, Died(texts[3]))
    assert isinstance(last, WorkerLost) and last.batch_at_fault
    msg = str(last)
    assert f"batch 5 killed {DEATHS_TO_FAIL} workers (pids 501, 502, 503, 504)" in msg, msg
    assert "none by a crash signal" in msg and "DataLoader worker (pid 504)" in msg
    # another batch, or the same batch in another epoch, starts from nothing
    assert not book.lost((1, 5, 7), 5, 0, Died(KILLED.format(pid=505))).batch_at_fault


def test_a_batch_queued_behind_the_one_a_worker_died_running_is_never_blamed():
    """torch's worker holds its batches in turn; one dealt behind a batch that kills every worker it
    runs on dies with it each time, and only the batch that ran is counted (the flaky blame of
    batch 0 beside a batch 2 that SIGKILLs its worker)."""
    book = Deaths("ray")
    culprit, bystander = (0, 2, 7), (0, 0, 7)
    for pid in range(601, 601 + DEATHS_TO_FAIL):
        queued = book.lost(bystander, 0, 0, Died(KILLED.format(pid=pid)), ran=False)
        assert not queued.batch_at_fault and "queued behind the batch it ran" in str(queued)
        ran = book.lost(culprit, 2, 0, Died(KILLED.format(pid=pid)))
    assert ran.batch_at_fault and f"batch 2 killed {DEATHS_TO_FAIL} workers" in str(ran)
    assert not book.lost(bystander, 0, 1, Died(KILLED.format(pid=700))).batch_at_fault  # its count is 1


def test_an_actor_stopped_or_a_node_lost_is_no_process_death():
    book = Deaths("ray")
    for _ in range(DEATHS_TO_FAIL + 1):
        err = book.lost((0, 1, 0), 1, 0, Died("The actor is dead because it was killed by `ray.kill`."))
        assert not err.batch_at_fault and "died while it held batch 1" in str(err)


def test_the_default_retry_rules_hand_a_lost_workers_batch_on_until_it_is_blamed():
    """The error the user reads for a batch that kills every worker is this module's, naming the
    pids: the retry rules hand the batch on after each of the deaths before `DEATHS_TO_FAIL`."""
    from hybridload.execution._retry import Action, LaneState, decide

    one_lane = LaneState(fails_in_row=0, lanes=1, others_working=False, others_usable=False)
    for attempts in range(1, DEATHS_TO_FAIL):
        assert decide(WorkerLost("pid 7 died"), attempts, one_lane).action is Action.RETRY, attempts


def test_a_crash_recorded_only_in_the_workers_crash_file_is_read_as_its_signal(tmp_path, monkeypatch):
    """Ray's death text says nothing of the signal, and a worker whose stderr the user silenced
    leaves no line in its Ray log: faulthandler's line in its crash file names the signal."""
    monkeypatch.setattr(deaths.compat, "ray_node_logs_dir", lambda: str(tmp_path))
    (tmp_path / "worker-ab-ffff-611.err").write_text(":job_id:01000000\n")  # stderr silenced: nothing there
    with open(deaths.crash_file(str(tmp_path), 611), "w") as f:
        f.write("Fatal Python error: Segmentation fault\n\nCurrent thread 0x7f (most recent call first):\n")
    assert deaths.signal_in_log("611") == "SIGSEGV"
    assert deaths.signal_in_log("612") is None  # no crash file, no log line: a death with no signal


def test_a_pool_that_fails_at_the_first_crash_blames_the_batch_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(deaths.compat, "ray_node_logs_dir", lambda: str(tmp_path))
    with open(deaths.crash_file(str(tmp_path), 701), "w") as f:
        f.write("Fatal Python error: Floating-point exception\n")
    assert not Deaths("ray").lost((0, 3, 0), 3, 0, Died(KILLED.format(pid=701))).batch_at_fault  # the lane: 2
    first = Deaths("ray-dataset", crashes_to_fail=1).lost((0, 3, 0), 3, 0, Died(KILLED.format(pid=701)))
    assert first.batch_at_fault and "killed by signal: Floating point exception" in str(first)  # strsignal, as torch
    assert (
        not Deaths("ray-dataset", crashes_to_fail=1).lost((0, 3, 0), 3, 0, Died(KILLED.format(pid=702))).batch_at_fault
    )
