"""Notes about this machine said once per process: a second loader (a resume, bench's modes,
profile's runs) finds the machine as the first did."""

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
