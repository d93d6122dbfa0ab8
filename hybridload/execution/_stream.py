"""`BatchStream`: one pass (dispatcher + merger + wait timing) as one object, so every consumer of
lanes (``HybridLoader``, the drop-in, the benchmarks) runs a pass the same way."""

from __future__ import annotations

import time
from typing import Sequence

from hybridload.execution._admission import ShareAdmission
from hybridload.execution._dispatch import Dispatcher
from hybridload.execution._hooks import DispatchHooks, NoHooks
from hybridload.errors import BatchTimeoutError
from hybridload.lanes._base import BatchTask, Lane
from hybridload.execution._merge import OrderedMerger
from hybridload.execution._pass_config import PassConfig
from hybridload.execution._trace import span


def default_window(lanes: Sequence[Lane], fallback: Sequence[Lane] = ()) -> int:
    """Two batches per slot of the primary lanes (of every lane while they have none, e.g. a Ray
    lane waiting for nodes)."""
    primary = sum(lane.slots for lane in lanes if not any(lane is f for f in fallback))
    return max(2, 2 * (primary or sum(lane.slots for lane in lanes)))


class BatchStream:
    """Ordered results of ``tasks[start:]`` run on ``lanes``, exactly once; a batch that does not
    arrive within ``batch_timeout_s`` raises `BatchTimeoutError` naming it and its lane. After the
    last batch ``next()`` keeps raising StopIteration, after ``close()`` (idempotent, also on
    garbage collection) or an error a RuntimeError naming it.

        with BatchStream(lanes, tasks, PassConfig(window=8), hooks=stats) as stream:
            for result in stream: ...

    Args:
        lanes: the lanes to run on (the `hybridload.lanes` contract).
        tasks: the pass's `BatchTask` s, ``tasks[k].seq == k``, each carrying its epoch, size and
            seed: a list, or tasks made when reached (`hybridload.execution._tasks`).
        config: the pass's settings, a `PassConfig`; None: its defaults.
        start: the first position to produce (resume).
        hooks: receives the dispatcher's reports and ``record_wait`` (e.g. LoaderStats).
        admission: which lane may take a new batch (`hybridload.execution._admission`); None: every
            lane may.
        fallback: lanes that take the batches the other lanes reroute.
    """

    def __init__(
        self,
        lanes: Sequence[Lane],
        tasks: Sequence[BatchTask],
        config: PassConfig | None = None,
        *,
        start: int = 0,
        hooks: DispatchHooks | None = None,
        admission: ShareAdmission | None = None,
        fallback: Sequence[Lane] = (),
    ):
        if config is not None and not isinstance(config, PassConfig):
            raise TypeError(
                f"BatchStream: config must be a PassConfig(window=..., batch_timeout_s=...), got {type(config).__name__}"
            )
        config = config if config is not None else PassConfig()
        listed = tasks if isinstance(tasks, (list, tuple)) else ()  # lazy tasks (execution.tasks) are made in place
        misplaced = next((k for k, task in enumerate(listed) if task.seq != k), None)
        if misplaced is not None:
            raise ValueError(
                f"BatchStream: tasks[{misplaced}] has seq {tasks[misplaced].seq}; a task's seq "
                "is its position in the pass"
            )
        self._hooks = hooks if hooks is not None else NoHooks()
        self._merger = OrderedMerger(
            start, len(tasks), config.window or default_window(lanes, fallback), config.batch_timeout_s
        )
        self._dispatcher = Dispatcher(
            lanes,
            tasks,
            start=start,
            merger=self._merger,
            hooks=self._hooks,
            config=config,
            admission=admission,
            fallback=fallback,
        )
        self._state = "open"  # "ended" (last batch taken), "failed" (an error) or "closed" (close())
        self._error = ""
        self._dispatcher.start()

    @property
    def position(self) -> int:
        """The sequence number of the next result to be returned."""
        return self._merger.next

    @property
    def closed(self) -> bool:
        """True once the pass ended (last batch, error, or ``close()``)."""
        return self._state != "open"

    def __len__(self) -> int:
        return self._merger.end

    def buffered(self) -> int:
        """Finished batches waiting in the reorder buffer (bounded by the window)."""
        return self._merger.buffered()

    def __iter__(self) -> "BatchStream":
        return self

    def __next__(self):
        if self._state != "open":
            self._after_end()
        t0 = time.perf_counter()
        try:
            with span("hybridload.wait_for_batch", None):  # a range in torch's profiler; the trace's "stall" below
                result = self._merger.get()
        except StopIteration:
            if self._state == "open":
                self._hooks.pass_ended()  # e.g. the pass's final count of skipped samples
            self._end("ended")
            raise
        except BatchTimeoutError as exc:
            if exc.seq is None:  # not the merger's own (it names its batch)
                self._end("failed", f"{type(exc).__name__}: {exc}")
                raise
            detail = self._dispatcher.where(exc.seq)
            self._end("failed", f"{type(exc).__name__}: {exc}")
            raise BatchTimeoutError(exc.seq, exc.timeout_s, detail) from None
        except BaseException as exc:
            if self._state != "open":  # another thread ended or closed the pass while we waited
                self._after_end()
            self._end("failed", f"{type(exc).__name__}: {exc}")
            raise
        self._dispatcher.wake()  # the window moved: more may start
        t1 = time.perf_counter()
        if self._hooks.trace is not None:
            self._hooks.trace.taken(self._merger.next - 1, t0, t1, pass_key=self._merger)
        self._hooks.record_wait(t1 - t0)
        return result

    def _after_end(self):
        if self._state == "ended":
            raise StopIteration
        if self._state == "closed":
            raise RuntimeError(
                "next() after close(): this pass was closed (by close() on its loader or "
                "stream); start a new pass with iter(loader)"
            )
        raise RuntimeError(f"this pass already ended with an error ({self._error}); start a new pass with iter(loader)")

    def _end(self, state: str, error: str = "") -> None:
        if self._state != "open":
            return
        self._state, self._error = state, error
        self._dispatcher.stop()
        self._merger.close()

    def close(self) -> None:
        """Stop dispatching and drop what is buffered. Idempotent."""
        self._end("closed")

    def __enter__(self) -> "BatchStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass
