"""hybridload.execution._retry.decide as a table: each row is one rule of the module docstring."""

import pytest

from hybridload.errors import LabelError, SampleError, UserCodeError, WorkerLost
from hybridload.lanes._base import Reroute
from hybridload.execution._retry import Action, LaneState, RetryRules, decide, own_failure

RULES = RetryRules(max_retries=3, break_after=2)
SAMPLE = SampleError(7, "a.jpg", "decode", "bad")


def state(fails=0, lanes=2, working=True, usable=True):
    return LaneState(fails_in_row=fails, lanes=lanes, others_working=working, others_usable=usable)


# (exception, attempts, lane state) -> (action, lane_fault, break_lane, exclude)
TABLE = [
    ("sample error is the result", SAMPLE, 1, state(), (Action.DELIVER, False, False, False)),
    (
        "sample error, lone lane",
        SAMPLE,
        1,
        state(lanes=1, working=False, usable=False),
        (Action.DELIVER, False, False, False),
    ),
    (
        "user code error is the result, never retried",
        UserCodeError("batch 2", "KeyError: 'x'"),
        1,
        state(lanes=1, working=False, usable=False),
        (Action.DELIVER, False, False, False),
    ),
    (
        "label error is the result",
        LabelError("sample 3", "bad label"),
        1,
        state(),
        (Action.DELIVER, False, False, False),
    ),
    ("first fault, another lane works", RuntimeError(), 1, state(), (Action.EXCLUDE, True, False, True)),
    ("second fault in a row breaks the lane", RuntimeError(), 1, state(fails=1), (Action.BREAK, True, True, True)),
    (
        "fault, lone lane: retried on it",
        RuntimeError(),
        1,
        state(lanes=1, working=False, usable=False),
        (Action.RETRY, True, False, False),
    ),
    (
        "fault breaks the lone lane: delivered",
        RuntimeError(),
        2,
        state(fails=1, lanes=1, working=False, usable=False),
        (Action.DELIVER, True, True, False),
    ),
    ("fault, attempts past max_retries", RuntimeError(), 4, state(), (Action.DELIVER, True, False, True)),
    (
        "fault, other lanes already excluded",
        RuntimeError(),
        2,
        state(usable=False),
        (Action.DELIVER, True, False, True),
    ),
    ("worker lost stays on the lane", WorkerLost(), 1, state(fails=1), (Action.RETRY, False, False, False)),
    ("worker lost gets one more try per lane", WorkerLost(), 5, state(lanes=2), (Action.RETRY, False, False, False)),
    ("worker lost past max_retries + lanes", WorkerLost(), 6, state(lanes=2), (Action.DELIVER, False, False, False)),
    ("reroute never counts against the lane", Reroute(), 1, state(fails=1), (Action.EXCLUDE, False, False, True)),
    ("reroute, nowhere else to go", Reroute(), 1, state(usable=False), (Action.DELIVER, False, False, True)),
]


@pytest.mark.parametrize("exc,attempts,lane,expected", [row[1:] for row in TABLE], ids=[row[0] for row in TABLE])
def test_decide_follows_the_rule_table(exc, attempts, lane, expected):
    d = decide(exc, attempts, lane, RULES)
    assert (d.action, d.lane_fault, d.break_lane, d.exclude) == expected
    assert d.hand_on == (d.action is not Action.DELIVER)


def test_break_after_one_breaks_on_the_first_fault():
    d = decide(RuntimeError(), 1, state(), RetryRules(max_retries=3, break_after=1))
    assert d.action is Action.BREAK and d.break_lane


def test_a_worker_lost_that_the_batch_caused_is_delivered_not_handed_on():
    lane = LaneState(fails_in_row=0, lanes=1, others_working=False, others_usable=False)
    assert decide(WorkerLost("pid 7 died"), 1, lane).action is Action.RETRY  # a lost worker: handed on
    at_fault = decide(WorkerLost("killed 2 workers", batch_at_fault=True), 2, lane)
    assert at_fault.action is Action.DELIVER and not at_fault.lane_fault and not at_fault.break_lane


@pytest.mark.parametrize(
    "exc,own",
    [
        (SAMPLE, True),
        (UserCodeError("batch 2", "KeyError: 'x'"), True),
        (LabelError("sample 3", "bad label"), True),
        (WorkerLost("killed 2 workers", batch_at_fault=True), True),
        (WorkerLost("pid 7 died"), False),
        (Reroute("not a JPEG"), False),
        (RuntimeError("device lost"), False),
    ],
    ids=["sample", "user_code", "label", "blamed_worker_lost", "worker_lost", "reroute", "lane_fault"],
)
def test_own_failure_is_exactly_what_decide_delivers_at_the_first_attempt_on_any_lane(exc, own):
    """The dispatcher delivers an own failure while another copy runs; it must be the rule-1 set."""
    assert own_failure(exc) is own
    assert (decide(exc, 1, state(), RULES).action is Action.DELIVER) is own
