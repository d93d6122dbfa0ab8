"""Bounded waits for tests: poll a condition, fail with what was awaited."""

import time


def wait_until(pred, timeout_s, what):
    """Poll ``pred`` every 0.1 s; AssertionError naming ``what`` past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.1)
