"""Callbacks on Ray futures: one runs on Ray's core-worker event thread, so a callback that calls
Ray and waits stops that thread, and every later Ray call of the process, for good; code a callback
may reach hands such calls to a thread of its own (docs/decisions/ray-callbacks-never-call-ray.md)."""

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
    """Call the actor's ``ready()``; ``on_answer(None or its error)`` on Ray's callback thread once
    it answers."""
    try:
        ref = handle.ready.remote()
    except Exception as exc:  # the handle is gone already
        on_answer(exc)
        return
    when_done(ref, lambda future: on_answer(future.exception()))
