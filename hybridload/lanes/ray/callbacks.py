"""Callbacks on Ray futures, and what they must not do.

A ``ref.future()`` callback runs on Ray's core-worker event thread, the thread that also
answers this process's own calls into Ray. A callback that calls Ray and waits (``ray.kill``,
``ray.get``) waits for the thread it is running on: that thread stops for good, and with it
every later Ray call of the process, signals included (docs/decisions/ray-callbacks-never-call-ray.md).
So the pool registers its callbacks through
`when_done`, and code a callback may reach asks `in_ray_callback` before calling
Ray, then hands the call to a thread of its own (`off_callback_thread`), as
`kill_actor` does.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

log = logging.getLogger(__name__)
_here = threading.local()


def report_converted(convert: Callable[[Any], Any], task, raw, done: Callable[[Any, Any], None]) -> None:
    """``done(task, convert(raw))``, or ``done(task, the exception)`` when the conversion fails."""
    try:
        result = convert(raw)
    except BaseException as exc:
        done(task, exc)
        return
    done(task, result)


def when_done(ref, fn: Callable[[Any], None]) -> None:
    """Call ``fn(future)`` once ``ref`` (an ObjectRef) is done, marked as a Ray callback."""

    def run(future) -> None:
        _here.active = True
        try:
            fn(future)
        finally:
            _here.active = False

    ref.future().add_done_callback(run)


def in_ray_callback() -> bool:
    """Whether this thread is running a callback registered by `when_done`."""
    return getattr(_here, "active", False)


def off_callback_thread(fn: Callable[..., None], *args: Any, name: str = "hybridload-ray-call") -> None:
    """Run ``fn(*args)`` now, or, inside a Ray callback, on a short-lived thread of its own."""
    if not in_ray_callback():
        fn(*args)
        return
    threading.Thread(target=fn, args=args, name=name, daemon=True).start()


def kill_actor(handle) -> None:
    """``ray.kill(handle, no_restart=True)``, safe to call from a Ray callback."""
    off_callback_thread(_kill_now, handle, name="hybridload-kill-actor")


def _kill_now(handle) -> None:
    import ray

    try:
        ray.kill(handle, no_restart=True)
    except Exception as exc:  # already gone
        log.debug("ray.kill failed: %s", exc)


def probe(handle, on_answer: Callable[[BaseException | None], None]) -> None:
    """Call the actor's ``ready()``; ``on_answer(None, or the error: a dead actor's)`` once it
    answers (on Ray's callback thread)."""
    try:
        ref = handle.ready.remote()
    except Exception as exc:  # the handle is gone already
        on_answer(exc)
        return
    when_done(ref, lambda future: on_answer(future.exception()))
