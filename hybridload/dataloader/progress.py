"""The drop-in DataLoader's place in its batch sampler's epoch: the batches that reached the
consumer, whatever its workers (processes or Ray actors) pulled ahead, as a resumable state of the
same shape as ``HybridLoader``'s.

A resumable drop-in needs a stateful batch sampler,
`DistributedBatchSampler`: its state resumes on any rank, at
any world size and batch size (`hybridload.sampling.resume`). torch's samplers keep no
position, so a loader built on one has no state to give.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator


def _stateful(batch_sampler: Any) -> bool:
    return all(hasattr(batch_sampler, m) for m in ("begin_pass", "pass_state", "load_state_dict"))


class PassProgress:
    """Counts the batches of the current pass delivered to the consumer; its state is the batch
    sampler's `PassState` (the one owner of the state) at that count.

    The pass is the one the loader's iterator began (``iter(batch_sampler)``, as torch's iterator
    calls it): the sampler counts what it hands to the workers, this what the consumer received.

    Args:
        batch_sampler: the loader's batch sampler (only a stateful one is tracked).
        where: the loader's name, for messages.
    """

    def __init__(self, batch_sampler: Any, where: str = "DataLoader"):
        self.sampler = batch_sampler if _stateful(batch_sampler) else None
        self.where = where
        self._counted: Counted | None = None  # the newest pass's iterator: an older one no longer counts

    def wrap(self, it: Iterator) -> Iterator:
        """``it``, a new pass's iterator (built calling ``iter(batch_sampler)``, as torch's does, which
        began the sampler's pass), counting what it hands out when the sampler is tracked (else ``it`` itself)."""
        if self.sampler is None:
            return it
        self._counted = Counted(it, self.sampler.pass_state.live)
        return self._counted

    def _need(self, what: str):
        if self.sampler is None:
            raise TypeError(
                f"{self.where}.{what}: the loader's batches come from a sampler that keeps no position; "
                "build it with batch_sampler=hybridload.sampling.DistributedBatchSampler(len(dataset), "
                "batch_size, ...) to save and resume"
            )
        return self.sampler

    def state_dict(self) -> dict:
        """The batch sampler's state at the last batch the consumer received (``HybridLoader``'s shape)."""
        ps = self._need("state_dict").pass_state
        c = self._counted
        if c is not None and c.pass_ is ps.current:
            return ps.get_state(position=c.position)
        return ps.get_state()

    def load_state_dict(self, state: Any) -> None:
        """Resume from a ``state_dict()`` of any rank, at any world size and batch size (a ``HybridLoader``'s,
        or a drop-in's saved as ``{"batch_sampler": state}``, which `PassState` reads as its inner state)."""
        sampler = self._need("load_state_dict")
        if not isinstance(state, Mapping):
            raise TypeError(
                f"{self.where}.load_state_dict: state must be the dict {self.where}.state_dict() returned, "
                f"got {type(state).__name__}"
            )
        sampler.load_state_dict(state, f"{self.where}.load_state_dict")


class Counted:
    """A pass's iterator of batches that counts each one it hands out (``position``: the place in the
    epoch of the next), and whose length is its pass's.

    Args:
        it: the iterator of the pass.
        pass_: the `Pass` it runs.
    """

    def __init__(self, it: Iterator, pass_: Any):
        self._it, self.pass_ = it, pass_
        self.position = pass_.start

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self.pass_)

    def __next__(self):
        batch = next(self._it)
        self.position += 1
        return batch
