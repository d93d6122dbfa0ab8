"""The one shutdown routine, `close_all`, so every floor that closes several parts closes them all
and reports every failure at the end."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from hybridload.errors._core import HybridLoadError


class ShutdownError(HybridLoadError, ExceptionGroup):
    """Closing some parts failed; every other part was still closed.

    An ``ExceptionGroup`` of each failure (each traceback is shown), whose message names the
    failed parts. Attributes: ``failures``, ``[(part name, exception), ...]``.
    """

    what: str
    failures: list[tuple[str, BaseException]]

    def __new__(cls, what: str, failures: list):
        names = "; ".join(f"{name} ({type(exc).__name__}: {exc})" for name, exc in failures)
        self = super().__new__(
            cls, f"{what}: {len(failures)} part(s) failed to close: {names}", [exc for _name, exc in failures]
        )
        self.what, self.failures = what, list(failures)
        return self

    def __reduce__(self):
        return (type(self), (self.what, self.failures))

    def __init__(self, what: str, failures: list):
        super().__init__(self.message, self.exceptions)

    def derive(self, excs):
        return ExceptionGroup(self.message, excs)


def close_all(parts: Iterable, what: str = "closing", *, log: logging.Logger | None = None) -> None:
    """Close every part in order, going on past a failure; then raise one
    `ShutdownError` naming each part that failed (nothing when all closed).

    A part is an object with ``close()``, a ``(name, fn)`` pair, or None (skipped). ``log`` is
    for paths with nobody to raise to (garbage collection, cleanup after another error).

    Args:
        parts: what to close, in order.
        what: the step, as the error names it ("closing the loader").
        log: a logger to warn on instead of raising; None raises.
    """
    failures = []
    for part in parts:
        if part is None:
            continue
        name, close = part if isinstance(part, tuple) else (_part_name(part), part.close)
        try:
            close()
        except Exception as exc:  # shutting down: the other parts still close
            failures.append((name, exc))
    if failures and log is not None:
        log.warning("%s", ShutdownError(what, failures))
    elif failures:
        raise ShutdownError(what, failures)


def take_all(held: list) -> list:
    """Empty ``held`` and return what it held, last first (the order to close it in).

    Args:
        held: the list to empty.
    """
    out = held[::-1]
    held.clear()
    return out


def _part_name(part) -> str:
    label = getattr(part, "name", None)
    return f"{type(part).__name__} {label!r}" if isinstance(label, str) else type(part).__name__
