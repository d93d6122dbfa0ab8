"""Every error hybridload raises survives pickling (Ray, worker processes, torch's
``ExceptionWrapper``) with its class, message and fields; the timeout says what torch's says
("DataLoader timed out after N seconds") and names the knob of the loader that raised it."""

import inspect
import pickle

import pytest

import hybridload.errors as E
from hybridload._dataloader.worker import InitFailed, UserFailure

EXAMPLES = {
    E.HybridLoadError: E.HybridLoadError("plain"),
    E.SampleError: E.SampleError(3, "/d/a.jpg", "decode", "truncated"),
    E.StorageError: E.StorageError(3, "s3://b/a.tar", "connection reset", 4, 2.5),
    E.OrderMismatchError: E.OrderMismatchError("keyed", "randperm", "HybridLoader.load_state_dict"),
    E.ResumeMismatchError: E.ResumeMismatchError("seed", 1, 2, "DistributedBatchSampler.load_state_dict"),
    E.BatchTimeoutError: E.BatchTimeoutError(5, 30.0, "held by lane 'ray'"),
    E.LaneUnavailableError: E.LaneUnavailableError("no DALI here"),
    E.NoActorsError: E.NoActorsError("no node with a free CPU"),
    E.NoLaneError: E.NoLaneError(4, {"ray": "broken"}, "add nodes"),
    E.WorkerLost: E.WorkerLost("DataLoader worker (pid 7) is killed by signal: Segmentation fault.", True),
    E.UserCodeError: E.UserCodeError("batch 3", "KeyError: 4", "Traceback ..."),
    E.LabelError: E.LabelError("sample 5", "label 'cat' is a str"),
    E.ManifestError: E.ManifestError("m.json entry 2: no url"),
    E.ShardIndexError: E.ShardIndexError("shard 1 of m.json", "12 samples, manifest says 10"),
    E.ShutdownError: E.ShutdownError("closing", [("lane 'ray'", ValueError("stuck"))]),
}


def fields(exc) -> dict:
    return {k: repr(v) for k, v in vars(exc).items() if not k.startswith("__")}  # exceptions compare by repr


def test_the_examples_cover_every_error_class():
    classes = {
        c
        for c in vars(E).values()
        if inspect.isclass(c) and issubclass(c, BaseException) and c.__module__ == E.__name__
    }
    assert classes == set(EXAMPLES)


@pytest.mark.parametrize("cls", list(EXAMPLES), ids=lambda c: c.__name__)
def test_every_error_survives_pickling_with_its_class_message_and_fields(cls):
    exc = EXAMPLES[cls]
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is cls and str(again) == str(exc)
    assert fields(again) == fields(exc)


@pytest.mark.parametrize("cls", [E.BatchTimeoutError, E.WorkerLost], ids=lambda c: c.__name__)
def test_the_drop_ins_runtime_errors_are_rebuilt_from_their_message_as_torchs_exception_wrapper_does(cls):
    exc = EXAMPLES[cls]
    again = cls(str(exc))  # torch's ExceptionWrapper and its test harness: exc_type(exc_msg)
    assert type(again) is cls and str(again) == str(exc)
    assert str(pickle.loads(pickle.dumps(again))) == str(exc)


def test_the_timeout_reads_as_torchs_and_names_the_knob_of_the_loader_that_raised_it():
    hybrid = E.BatchTimeoutError(5, 30.0, "held by lane 'ray'")
    assert str(hybrid).startswith("HybridLoader timed out after 30 seconds: batch 5 did not arrive within 30 s")
    assert "LoaderPolicy(batch_timeout_s=...)" in str(hybrid)
    dropin = E.BatchTimeoutError(5, 30.0, "held by lane 'ray'", "DataLoader", "DataLoader(timeout=...)")
    assert str(dropin).startswith("DataLoader timed out after 30 seconds")
    assert "DataLoader(timeout=...)" in str(dropin) and "batch_timeout_s" not in str(dropin)
    assert str(pickle.loads(pickle.dumps(dropin))) == str(dropin)


def test_the_drop_ins_carried_failures_survive_pickling():
    try:
        raise KeyError("record 4")
    except KeyError:
        import sys

        failure = UserFailure(sys.exc_info(), "in DataLoader worker 0, batch 2")
    init = pickle.loads(pickle.dumps(InitFailed(failure)))
    assert type(init) is InitFailed and str(init) == "in DataLoader worker 0, batch 2: KeyError: 'record 4'"
    with pytest.raises(KeyError, match="record 4"):
        init.failure.reraise()
