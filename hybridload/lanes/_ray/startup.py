"""An actor pool's start: it works from its first ready actor, the others joining as they come up,
started in two waves so a node's first actor does not share its CPUs with the rest while importing
(on 2 cores the first of 16 was ready after 15 s, one alone after 1.5 s)."""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from hybridload.lanes._ray.callbacks import when_done
from hybridload.lanes._ray.members import State


def _reporter(on_ready: Callable[[Any, BaseException | None], None], member: Any) -> Callable[[Any], None]:
    """The callback that reports ``member``'s ready future to ``on_ready``."""
    return lambda future: on_ready(member, future.exception())


def start_waves(where: list[str]) -> tuple[list[str], list[str]]:
    """(first wave: the first actor of each node, in placement order; the rest)."""
    seen: set[str] = set()
    first: list[str] = []
    rest: list[str] = []
    for node_id in where:
        (rest if node_id in seen else first).append(node_id)
        seen.add(node_id)
    return first, rest


def await_first_ready(
    ray,
    refs: Mapping[Any, Any],
    on_ready: Callable[[Any, BaseException | None], None],
    timeout_s: float,
    where: list[str],
) -> None:
    """Wait until one of ``refs`` (a ``ready()`` ref -> its member) answers, reporting each answer
    to ``on_ready`` and leaving the rest to Ray's callbacks; raises the start error when every actor
    failed, TimeoutError when none answered within ``timeout_s``."""
    pending, deadline, error = list(refs), time.monotonic() + timeout_s, None
    ready = False
    while pending and not ready:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        done, pending = ray.wait(pending, num_returns=1, timeout=left)
        if not done:  # the time is up
            break
        for ref in done:
            try:
                ray.get(ref)
            except Exception as exc:  # this actor could not start: the keeper tries again
                error = error or exc
                on_ready(refs[ref], exc)
                continue
            on_ready(refs[ref], None)
            ready = True
    if not ready:
        if error is not None and not pending:
            raise error
        raise TimeoutError(
            f"no Ray actor started within {timeout_s:g} s on nodes {where}; the cluster may lack "
            "free CPUs (check `ray status`), or its machines are loaded: allow more with "
            "HYBRIDLOAD_ACTOR_START_TIMEOUT_S (seconds)"
        )
    for ref in pending:
        member = refs[ref]
        when_done(ref, _reporter(on_ready, member))


def first_ready(
    ray,
    first: list,
    on_ready: Callable[[Any, BaseException | None], None],
    timeout_s: float,
    where: list[str],
    go_on: Callable[[str], None] | None = None,
) -> None:
    """Start the pool on its first wave; when none is ready in time and ``go_on`` is given (a local
    stand-in runs meanwhile), call it with the reason and keep watching the rest; else raise."""
    if not first:
        return
    try:
        await_first_ready(ray, {m.handle.ready.remote(): m for m in first}, on_ready, timeout_s, where)
    except Exception as exc:  # TimeoutError, or the start error every first actor met
        if go_on is None:
            raise
        go_on(f"{type(exc).__name__}: {exc}")
        for m in first:
            if m.state is State.STARTING:
                when_done(m.handle.ready.remote(), _reporter(on_ready, m))
