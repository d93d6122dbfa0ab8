"""What the lanes say about this machine, said once per process.

A second loader in one process (a loader made again to resume, one per mode in
``hybridload bench``, one per measurement in ``hybridload profile``) finds the machine as the
first did; its note repeated is noise. `first_time` is true for a text the first time only.
"""

from __future__ import annotations

import threading

_said: set[str] = set()
_lock = threading.Lock()


def first_time(text: str) -> bool:
    """True the first time this process asks about ``text``, False after."""
    with _lock:
        if text in _said:
            return False
        _said.add(text)
        return True


def forget() -> None:
    """Say everything again (a test that counts what a fresh process says)."""
    with _lock:
        _said.clear()
