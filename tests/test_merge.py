import threading
import time

import pytest

from hybridload.errors import BatchTimeoutError
from hybridload.execution._merge import OrderedMerger


def test_release_is_in_sequence_order_whatever_the_arrival_order():
    m = OrderedMerger(0, 6, window=6, timeout_s=5)
    for seq in (3, 1, 5, 0, 4, 2):
        assert m.put(seq, f"b{seq}")
    assert [m.get() for _ in range(6)] == [f"b{i}" for i in range(6)]
    with pytest.raises(StopIteration):
        m.get()


def test_exactly_once_duplicates_and_stale_results_are_dropped():
    m = OrderedMerger(0, 3, window=3, timeout_s=5)
    assert m.put(1, "first") and not m.put(1, "second")
    m.put(0, "zero")
    assert m.get() == "zero"
    assert not m.put(0, "late duplicate")
    assert m.get() == "first"
    assert m.duplicates == 2


def test_window_bounds_what_may_start():
    m = OrderedMerger(10, 100, window=4, timeout_s=5)
    assert [s for s in range(8, 20) if m.admits(s)] == [10, 11, 12, 13]
    m.put(10, "x")
    m.get()
    assert m.admits(14) and not m.admits(15)


def test_missing_batch_ends_in_timeout_naming_it():
    m = OrderedMerger(0, 3, window=3, timeout_s=0.3)
    m.put(0, "a")
    m.put(2, "c")
    assert m.get() == "a"
    t0 = time.monotonic()
    with pytest.raises(BatchTimeoutError, match=r"batch 1 did not arrive within 0.3 s"):
        m.get()
    assert time.monotonic() - t0 < 3


def test_errors_are_raised_in_order_after_earlier_results():
    m = OrderedMerger(0, 3, window=3, timeout_s=5)
    m.put(1, ValueError("bad batch 1"), error=True)
    m.put(0, "ok")
    assert m.get() == "ok"
    with pytest.raises(ValueError, match="bad batch 1"):
        m.get()


def test_get_wakes_when_a_producer_thread_delivers():
    m = OrderedMerger(0, 2, window=2, timeout_s=5)
    threading.Timer(0.1, lambda: (m.put(1, "b"), m.put(0, "a"))).start()
    assert m.get() == "a" and m.get() == "b"
