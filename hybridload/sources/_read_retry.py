"""Retrying a read that failed for a reason that is not the sample's (a connection, a timeout,
a server error, which often pass), then a `StorageError`, never skipped as bad data."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger("hybridload.sources")

#: what a read raises about the sample itself (bad data): not retried, skippable
DATA_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


@dataclass(frozen=True)
class ReadRetry:
    """How a source retries a read that failed for a reason other than the sample's.

    The pause before attempt ``k + 1`` is ``backoff_s * 2**(k - 1)``, at most ``max_backoff_s``.
    With the defaults a failing read is tried 4 times over about 1.75 s, on top of what the
    storage client retries itself (s3fs and botocore retry too).

    Attributes:
        attempts: how many times a read is tried in all (1: never again).
        backoff_s: the pause before the second attempt, in seconds.
        max_backoff_s: the longest pause between two attempts, in seconds.
    """

    attempts: int = 4
    backoff_s: float = 0.25
    max_backoff_s: float = 4.0

    def __post_init__(self):
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"ReadRetry: attempts must be an int >= 1 (1: no retry), got {self.attempts!r}")
        for name in ("backoff_s", "max_backoff_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"ReadRetry: {name} must be a finite number of seconds >= 0, got {v!r}")

    def pause(self, failed: int) -> float:
        """Seconds to wait after the ``failed``-th failed attempt (1, 2, ...)."""
        return min(self.max_backoff_s, self.backoff_s * 2 ** (failed - 1))


DEFAULT_READ_RETRY = ReadRetry()


class ReadsExhausted(Exception):
    """Every attempt of a read failed (see `with_retries`).

    Attributes:
        cause: the last attempt's exception.
        attempts: how many attempts were made.
        seconds: how long they took, pauses included.
    """

    def __init__(self, cause: BaseException, attempts: int, seconds: float):
        self.cause, self.attempts, self.seconds = cause, attempts, seconds
        super().__init__(f"{attempts} attempts over {seconds:.1f} s; the last: {type(cause).__name__}: {cause}")


def with_retries(fetch: Callable[[], Any], retry: ReadRetry, what: str) -> Any:
    """``fetch()``, tried again after ``retry``'s pauses while it raises something other than
    a `DATA_ERRORS` (raised at once). Raises `ReadsExhausted` when every
    attempt failed.

    Args:
        fetch: the read, without arguments.
        retry: how often and after which pauses.
        what: the location read, for the log.
    """
    t0 = time.monotonic()
    for attempt in range(1, retry.attempts + 1):
        try:
            return fetch()
        except DATA_ERRORS:
            raise
        except Exception as exc:  # any storage client's error: the storage's, not the sample's
            if attempt == retry.attempts:
                raise ReadsExhausted(exc, attempt, time.monotonic() - t0) from exc
            pause = retry.pause(attempt)
            log.info(
                "reading %s failed (%s: %s); attempt %d of %d in %.2f s",
                what,
                type(exc).__name__,
                exc,
                attempt + 1,
                retry.attempts,
                pause,
            )
            time.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
