"""The pass's admission policy (the lane shares) and its settings (PassConfig), checked directly:
pure logic, no lanes, no threads."""

from __future__ import annotations

import math

import pytest

from hybridload.execution._admission import ShareAdmission
from hybridload.execution._pass_config import PassConfig
from hybridload.execution._retry import RetryRules, StragglerRule
from hybridload.execution._stream import BatchStream
from hybridload.lanes._base import LaneKind

GPU, CPU = LaneKind.GPU, LaneKind.CPU_LOCAL


def handed_out(admission: ShareAdmission, n: int) -> int:
    """How many of ``n`` batches the GPU lane takes when it is asked first every time (the
    dispatcher's order) and the CPU lane takes the rest."""
    gpu = 0
    for total in range(n):
        if admission.can_take(GPU, gpu, total):
            gpu += 1
    return gpu


@pytest.mark.parametrize("cap", [0.0, 0.1, 0.25, 0.5, 0.7, 1.0])
def test_a_capped_kind_takes_its_share_of_the_batches_and_never_more(cap):
    for n in (1, 7, 40, 1000):
        gpu = handed_out(ShareAdmission({GPU: cap}), n)
        assert gpu <= cap * n + 1e-9  # never past the cap
        assert gpu >= math.floor(cap * n) - 1  # and asked first, it takes what the cap allows


def test_an_uncapped_kind_may_always_take():
    admission = ShareAdmission({GPU: 0.0})
    assert all(admission.can_take(CPU, handed, 10) for handed in range(11))
    assert handed_out(ShareAdmission(), 50) == 50


def test_the_steering_hook_is_told_each_batch_and_its_answer_is_the_next_admission():
    calls = []

    class Stop:
        def batch_done(self, seq, lane, images, seconds, caps):
            calls.append((seq, lane, images, seconds, caps))
            return {GPU: 0.0} if seq == 1 else None

    admission = ShareAdmission({GPU: 1.0}, steer=Stop())
    admission.batch_done(0, "gpu", 4, 0.5)
    assert admission.can_take(GPU, 1, 1)
    admission.batch_done(1, "cpu", 3, 0.25)
    assert not admission.can_take(GPU, 0, 2) and admission.share(GPU) == 0.0
    assert calls == [(0, "gpu", 4, 0.5, {GPU: 1.0}), (1, "cpu", 3, 0.25, {GPU: 1.0})]


def test_without_a_steering_hook_the_caps_stay_and_snapshots_are_copies():
    admission = ShareAdmission({GPU: 0.4})
    admission.batch_done(0, "gpu", 4, 0.1)
    snap = admission.snapshot()
    snap[GPU] = 0.9
    assert admission.snapshot() == {GPU: 0.4} and admission.share(CPU) is None and admission.steer is None


@pytest.mark.parametrize(
    "caps,message",
    [
        ({GPU: 1.5}, r"the cap of <LaneKind.GPU.*must be a share in \[0, 1\].*got 1.5"),
        ({GPU: float("nan")}, r"must be a share in \[0, 1\].*got nan"),
        ({GPU: True}, r"must be a share in \[0, 1\].*got True"),
        ({GPU: "0.5"}, r"must be a share in \[0, 1\].*got '0.5'"),
        ({"gpu": 0.5}, r"a cap's key must be a LaneKind \(e.g. LaneKind.GPU\), got 'gpu'"),
    ],
)
def test_a_bad_cap_is_refused_naming_the_kind_and_what_to_write(caps, message):
    with pytest.raises(ValueError, match=message):
        ShareAdmission(caps)


def test_a_steering_hook_answering_a_bad_share_is_refused_and_the_caps_stay():
    class Bad:
        def batch_done(self, *args):
            return {GPU: -0.1}

    admission = ShareAdmission({GPU: 0.5}, steer=Bad())
    with pytest.raises(ValueError, match=r"the cap of <LaneKind.GPU.*got -0.1"):
        admission.batch_done(0, "gpu", 1, 0.1)
    assert admission.snapshot() == {GPU: 0.5}


def test_pass_config_defaults_are_the_streams_former_defaults():
    config = PassConfig()
    assert (
        config.window,
        config.batch_timeout_s,
        config.rules,
        config.stragglers,
        config.gpu_memory_budget_mb,
        config.tick_s,
    ) == (None, 300.0, RetryRules(), StragglerRule(), None, 0.05)
    with pytest.raises(AttributeError):
        config.window = 3  # frozen


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("window", 0, r"window must be None \(two per lane slot\) or an int >= 1, got 0"),
        ("window", 2.5, r"window must be None .* got 2.5"),
        ("batch_timeout_s", 0, r"batch_timeout_s must be a positive finite number of seconds .* got 0"),
        ("batch_timeout_s", float("inf"), r"batch_timeout_s must be .* got inf"),
        ("rules", (3, 2), r"rules must be a RetryRules\(max_retries=..., break_after=...\), got \(3, 2\)"),
        (
            "stragglers",
            None,
            r"stragglers must be a StragglerRule\(straggler_factor=..., straggler_min_s=...\) \(StragglerRule\(None\) "
            r"turns re-issuing off\), got None",
        ),
        (
            "gpu_memory_budget_mb",
            0,
            r"gpu_memory_budget_mb must be None \(unbounded\) or a positive number of MiB, got 0",
        ),
        ("gpu_memory_budget_mb", True, r"gpu_memory_budget_mb must be .* got True"),
        ("tick_s", -1, r"tick_s must be a positive finite number of seconds .* got -1"),
    ],
)
def test_a_bad_pass_setting_is_refused_naming_it_and_what_to_write(field, value, message):
    with pytest.raises(ValueError, match=r"PassConfig: " + message):
        PassConfig(**{field: value})


def test_a_stream_given_settings_that_are_not_a_pass_config_says_what_to_write():
    with pytest.raises(
        TypeError,
        match=r"BatchStream: config must be a PassConfig\(window=..., batch_timeout_s=...\), "
        r"got int",
    ):
        BatchStream([], [], 4)
