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
    return all(hasattr(batch_sampler, m) for m in ("prepare_pass", "state_at", "load_state_dict"))


class PassProgress:
    """Counts the batches of the current pass delivered to the consumer.

    Args:
        batch_sampler: the loader's batch sampler (only a stateful one is tracked).
        where: the loader's name, for messages.
    """

    def __init__(self, batch_sampler: Any, where: str = "DataLoader"):
        self.sampler = batch_sampler if _stateful(batch_sampler) else None
        self.where = where
        self.start: int | None = None  # the live pass's first batch; None: no pass begun since the last load
        self.delivered = 0
        self.pass_id = 0  # the live pass: an older pass's iterator no longer counts

    def begin(self) -> None:
        """A pass starts: the sampler begins it now, so its start is known."""
        if self.sampler is not None:
            self.start, self.delivered = self.sampler.prepare_pass(), 0
            self.pass_id += 1

    def wrap(self, it: Iterator) -> Iterator:
        """``it``, counting what it hands out when the sampler is tracked (else ``it`` itself)."""
        return Counted(it, self) if self.sampler is not None else it

    def _need(self, what: str):
        if self.sampler is None:
            raise TypeError(f"{self.where}.{what}: the loader's batches come from a sampler that keeps no position; "
                            "build it with batch_sampler=hybridload.sampling.DistributedBatchSampler(len(dataset), "
                            "batch_size, ...) to save and resume")
        return self.sampler

    def state_dict(self) -> dict:
        """The batch sampler's state at the last batch the consumer received."""
        sampler = self._need("state_dict")
        position = sampler.position if self.start is None else self.start + self.delivered
        return {STATE_KEY: sampler.state_at(position)}

    def load_state_dict(self, state: dict) -> None:
        """Resume from a ``state_dict()`` of any rank, at any world size and batch size."""
        sampler = self._need("load_state_dict")
        if not isinstance(state, dict) or STATE_KEY not in state:
            raise TypeError(f"{self.where}.load_state_dict: state must be the dict {self.where}.state_dict() returned "
                            f"(with a {STATE_KEY!r} entry), got {type(state).__name__}")
        sampler.load_state_dict(state[STATE_KEY])
        self.start, self.delivered, self.pass_id = None, 0, self.pass_id + 1


class Counted:
    """An iterator of batches that counts each one it hands out on its `PassProgress`."""

    def __init__(self, it: Iterator, progress: PassProgress):
        self._it, self._progress, self._pass = it, progress, progress.pass_id

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._it)  # type: ignore[arg-type]  # torch's loader iterators have a len()

    def __next__(self):
        batch = next(self._it)
        if self._pass == self._progress.pass_id:
            self._progress.delivered += 1
        return batch
