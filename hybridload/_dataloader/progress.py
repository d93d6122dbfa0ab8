"""The drop-in's place in its batch sampler's epoch: the batches that reached the consumer, whatever
its workers pulled ahead, as a state of ``HybridLoader``'s shape; only a stateful
`DistributedBatchSampler` has one, since torch's samplers keep no position."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator


def _stateful(batch_sampler: Any) -> bool:
    return all(hasattr(batch_sampler, m) for m in ("begin_pass", "pass_state", "load_state_dict"))


class PassProgress:
    """Counts the batches of the current pass delivered to the consumer (the sampler counts what it
    hands the workers); its state is the sampler's `PassState` at that count.

    Args:
        batch_sampler: the loader's batch sampler (only a stateful one is tracked).
        where: the loader's name, for messages.
    """

    def __init__(self, batch_sampler: Any, where: str = "DataLoader"):
        self.sampler = batch_sampler if _stateful(batch_sampler) else None
        self.where = where
        self._counted: Counted | None = None  # the newest pass's iterator: an older one no longer counts

    def wrap(self, it: Iterator) -> Iterator:
        """``it``, a new pass's iterator (made by ``iter(batch_sampler)``, as torch's, which began
        the pass), counting what it hands out when the sampler is tracked."""
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
        """Resume from any rank's ``state_dict()``, at any world size and batch size (an older
        drop-in state wrapped as ``{"batch_sampler": state}`` too)."""
        sampler = self._need("load_state_dict")
        if not isinstance(state, Mapping):
            raise TypeError(
                f"{self.where}.load_state_dict: state must be the dict {self.where}.state_dict() returned, "
                f"got {type(state).__name__}"
            )
        sampler.load_state_dict(state, f"{self.where}.load_state_dict")


class Counted:
    """A pass's iterator that counts the batches it hands out (``position``: the epoch's next), its
    length its pass's.

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
