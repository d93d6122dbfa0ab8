"""One pass of an ``IterableDataset`` over actors in torch's order: workers in turn, an exhausted
one dropping out, ``prefetch`` calls queued per id (an actor runs one caller's calls in order). A
lost actor takes its iterators' state with it, so the pass ends with `WorkerLost`, as torch's does
for a dead worker."""

from __future__ import annotations

import warnings
from collections import deque

from hybridload.errors import BatchTimeoutError, WorkerLost
from hybridload._dataloader.iterable_worker import End
from hybridload._dataloader.worker import UserFailure


class SizedPass:
    """A pass over an ``IterableDataset``: its own iterator, with the ``len()`` torch gives it
    (the dataset's ``__len__``; a TypeError where it has none)."""

    _length: int | None

    def __iter__(self):
        return self

    def __len__(self) -> int:
        if self._length is None:
            raise TypeError("this IterableDataset has no __len__")
        return self._length


class IterablePass(SizedPass):
    """Batches of ``handles`` (``{worker id: actor}``) in torch's turn order; ``shared_seed``: a
    DataPipe's seed for this pass."""

    def __init__(
        self, handles: dict, base_seed: int, *, prefetch: int, timeout_s: float, length=None, shared_seed=None
    ):
        import ray

        self._ray, self._timeout = ray, timeout_s
        self._handles, self._length = handles, length
        self._taken = 0  # batches taken: `_lost` reads it, from the pass's start on
        actors = {id(h): h for h in handles.values()}
        try:
            ray.get([h.begin.remote(base_seed, shared_seed) for h in actors.values()], timeout=timeout_s)
        except Exception as exc:
            raise self._lost(exc, "starting the pass") from None
        self._queued = {
            w: deque(h.next_batch.remote(w) for _ in range(max(1, prefetch))) for w, h in sorted(handles.items())
        }
        self._turn = deque(sorted(handles))  # ids still yielding, the next to serve first
        self.closed, self._ended = False, False

    def __next__(self):
        if self.closed:
            if self._ended:
                raise StopIteration
            raise RuntimeError(
                "next() after close(): this pass was closed (by close() on its loader); start a "
                "new pass with iter(loader)"
            )
        while self._turn:
            w = self._turn[0]
            ref = self._queued[w].popleft()
            try:
                out = self._ray.get(ref, timeout=self._timeout)
            except self._ray.exceptions.GetTimeoutError:
                self._ended = True
                self.close()
                raise BatchTimeoutError(
                    self._taken, self._timeout, f"DataLoader worker {w}'s next batch (a Ray actor)"
                ) from None
            except Exception as exc:
                self._ended = True
                self.close()
                raise self._lost(exc, f"DataLoader worker {w}'s next batch") from None
            if isinstance(out, End):  # this id's data ended: it leaves the turn
                self._turn.popleft()
                self._queued.pop(w, None)
                continue
            self._queued[w].append(self._handles[w].next_batch.remote(w))
            self._turn.rotate(-1)
            self._taken += 1
            return out
        self._ended = True
        self.close()
        raise StopIteration

    def _lost(self, exc: BaseException, what: str) -> BaseException:
        from hybridload.errors import HybridLoadError

        cause = getattr(exc, "cause", None)
        if isinstance(cause, HybridLoadError):
            return cause
        unsent = UserFailure.unsendable(exc, self._taken)  # a batch Ray could not send back
        if unsent is not None:
            return unsent.error()
        if isinstance(exc, (self._ray.exceptions.RayActorError, self._ray.exceptions.ActorDiedError)):
            how = (  # ActorUnavailableError is a RayActorError too: the actor may live
                f"could not be reached ({what}: {exc}); whether it ran the call is unknown and"
                if isinstance(exc, self._ray.exceptions.ActorUnavailableError)
                else f"died ({what});"
            )
            return WorkerLost(
                f"a Ray actor running DataLoader workers {how} an IterableDataset's iterator cannot "
                "move to another worker, so this pass ends"
            )
        return exc

    def close(self) -> None:
        """End the pass (idempotent); results still queued are dropped."""
        self.closed = True
        self._queued.clear()
        self._turn.clear()


def warn_past_length(dataset, reported: int | None, yielded: int, workers: int) -> None:
    """torch's warning, in its words, for a pass yielding more batches than the ``len(dataloader)``
    read before it (``reported``; None: never read)."""
    if reported is None or yielded <= reported:
        return
    msg = (
        f"Length of IterableDataset {dataset} was reported to be {reported}"
        f"(when accessing len(dataloader)), but {yielded} samples have been fetched. "
    )
    if workers > 0:
        msg += (
            "For multiprocessing data-loading, this could be caused by not properly configuring the "
            "IterableDataset replica at each worker. Please see "
            "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset for examples."
        )
    warnings.warn(msg, stacklevel=3)
