"""An actor pool's start: its actors start concurrently and the pool goes to work as soon as
the first of them is ready; the others join as they come up (a slow or dead node never holds
the stream's first batch), each reporting through the pool's ``on_ready``."""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping


def await_first_ready(ray, refs: Mapping[Any, Any], on_ready: Callable[[Any, BaseException | None], None],
                      timeout_s: float, where: list[str]) -> None:
    """Wait until one of ``refs`` (an actor's ``ready()`` ref -> its member) answers; report
    each that answered, or failed, to ``on_ready(member, exception or None)`` and hand the
    rest to Ray's callbacks. Raises the start error when every actor failed, TimeoutError
    when none answered within ``timeout_s``."""
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
        raise TimeoutError(f"no Ray actor started within {timeout_s:g} s on nodes {where}; the cluster may lack "
                           "free CPUs (check `ray status`)")
    for ref in pending:
        member = refs[ref]
        ref.future().add_done_callback(lambda f, m=member: on_ready(m, f.exception()))
