"""The drop-in DataLoader's place in its batch sampler's epoch: the batches that reached the
consumer, whatever its workers (processes or Ray actors) pulled ahead, as a resumable state.

A resumable drop-in needs a stateful batch sampler,
`DistributedBatchSampler`: its state resumes on any rank, at
any world size and batch size (`hybridload.sampling.resume`). torch's samplers keep no
position, so a loader built on one has no state to give.
"""

from __future__ import annotations

from typing import Any, Iterator

STATE_KEY = "batch_sampler"


def _stateful(batch_sampler: Any) -> bool:
    return all(hasattr(batch_sampler, m) for m in ("prepare_pass", "pass_state", "load_state_dict"))


class PassProgress:
    """Reports the batches of the current pass delivered to the consumer to the batch sampler's
    `PassState` (the one owner of the position and the state).

    Args:
        batch_sampler: the loader's batch sampler (only a stateful one is tracked).
        where: the loader's name, for messages.
    """

    def __init__(self, batch_sampler: Any, where: str = "DataLoader"):
        self.sampler = batch_sampler if _stateful(batch_sampler) else None
        self.where = where
        self.pass_id: int | None = None  # the live pass: an older pass's iterator no longer counts

    def begin(self) -> None:
        """A pass starts: the sampler begins it now, so its start is known."""
        if self.sampler is not None:
            self.pass_id = self.sampler.prepare_pass()

    def wrap(self, it: Iterator) -> Iterator:
        """``it``, counting what it hands out when the sampler is tracked (else ``it`` itself)."""
        return Counted(it, self.sampler.pass_state, self.pass_id) if self.sampler is not None else it

    def _need(self, what: str):
        if self.sampler is None:
            raise TypeError(
                f"{self.where}.{what}: the loader's batches come from a sampler that keeps no position; "
                "build it with batch_sampler=hybridload.sampling.DistributedBatchSampler(len(dataset), "
                "batch_size, ...) to save and resume"
            )
        return self.sampler

    def state_dict(self) -> dict:
        """The batch sampler's state at the last batch the consumer received."""
        return {STATE_KEY: self._need("state_dict").state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Resume from a ``state_dict()`` of any rank, at any world size and batch size."""
        sampler = self._need("load_state_dict")
        if not isinstance(state, dict) or STATE_KEY not in state:
            raise TypeError(
                f"{self.where}.load_state_dict: state must be the dict {self.where}.state_dict() returned "
                f"(with a {STATE_KEY!r} entry), got {type(state).__name__}"
            )
        sampler.load_state_dict(state[STATE_KEY])


class Counted:
    """An iterator of batches that reports each one it hands out to a `PassState` as pass ``pass_id``'s."""

    def __init__(self, it: Iterator, pass_state: Any, pass_id: int | None):
        self._it, self._state, self._pass = it, pass_state, pass_id

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._it)  # type: ignore[arg-type]  # torch's loader iterators have a len()

    def __next__(self):
        batch = next(self._it)
        if self._pass is not None:
            self._state.advance(self._pass)
        return batch
