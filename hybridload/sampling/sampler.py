"""DistributedBatchSampler: a rank's batches of each epoch as a stateful iterable, resumable
by any rank at any world size and batch size (`hybridload.sampling.resume`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from hybridload.sampling.keyed_shard_order import check_order, keyed_order_for
from hybridload.sampling.pass_state import Pass, PassState, check_epoch
from hybridload.sampling.resume import plan_rank_batches, size, split_of
from hybridload.sampling.uneven import check_even_batches, real_samples, without_padding
from hybridload.sampling.sharding import check_batch_size, check_split, num_batches, rank_batches, resolve_rank


class DistributedBatchSampler:
    """A stateful iterable of this rank's batches (lists of indices), usable as a torch
    DataLoader ``batch_sampler``. ``set_epoch`` like DistributedSampler; ``state_dict``
    / ``load_state_dict`` resume mid-epoch exactly. Its place and saved state are its
    `PassState` (``pass_state``): epochs across passes follow that class's rules.

    Args:
        n: the dataset's length.
        batch_size: samples per batch on this rank.
        seed: the order's key (the order of epoch e is ``torch.randperm`` seeded with
            ``seed + e``, as DistributedSampler).
        shuffle: False keeps the dataset's order.
        drop_last: drop the tail that does not divide evenly among ranks (and the last
            partial batch) instead of padding.
        rank: this rank; default as `resolve_rank`.
        world_size: the number of ranks; default as `resolve_rank`.
        order: "randperm" (DistributedSampler's order, the default) or "keyed" (the same indices
            computed batch by batch: `hybridload.sampling.keyed_order`), as `OrderMismatchError` names
            them; or a source's ``sample_order()`` (e.g. the shard-aware order of
            ``TarShards(read="shard")``); None: "randperm".
        fingerprint: what identifies the dataset beyond its size, for its saved states (``Source.fingerprint``).
        even_batches: True (DistributedSampler's): every rank the same number of batches, the
            epoch padded with repeats; False: no padding, each sample once across the ranks,
            whose batch counts may differ (for evaluation: `hybridload.sampling.uneven`).
    """

    def __init__(
        self,
        n: int,
        batch_size: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        order: Any = None,
        fingerprint: Callable[[], str | None] | None = None,
        even_batches: bool = True,
    ):
        rank, world_size = resolve_rank(rank, world_size)
        check_batch_size(batch_size, "DistributedBatchSampler")
        check_split(n, batch_size, world_size, rank)
        if isinstance(order, str):  # the setting's name, as HybridLoader(order=...) and a checkpoint spell it
            order = keyed_order_for(None) if check_order(order, "DistributedBatchSampler") == "keyed" else None
        #: the one owner of this sampler's place in its epoch and of its saved state
        self.pass_state = PassState(
            n,
            batch_size,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
            rank=rank,
            world_size=world_size,
            order=order,
            fingerprint=fingerprint,
        )
        self.even_batches = check_even_batches(even_batches, drop_last, "DistributedBatchSampler")

    n = property(lambda self: self.pass_state.num_samples)
    batch_size = property(lambda self: self.pass_state.batch_size)
    seed = property(lambda self: self.pass_state.seed)
    shuffle = property(lambda self: self.pass_state.shuffle)
    drop_last = property(lambda self: self.pass_state.drop_last)
    rank = property(lambda self: self.pass_state.rank)
    world_size = property(lambda self: self.pass_state.world_size)
    order = property(lambda self: self.pass_state.order)
    epoch = property(lambda self: self.pass_state.epoch)

    @property
    def position(self) -> int:
        """Batches of the current epoch delivered so far (where a resume would start)."""
        return self.pass_state.position

    def set_epoch(self, epoch: int) -> None:
        """The next pass is epoch ``epoch``, from its start; right after a resume into that
        same epoch, from the resume point (`PassState.set_epoch`). An int in [0, 2**63), as
        `HybridLoader.set_epoch` takes (`check_epoch`)."""
        self.pass_state.set_epoch(check_epoch(epoch, where="DistributedBatchSampler.set_epoch"))

    def __len__(self) -> int:
        """The batches the next iterator yields (torch's meaning): of a pass ``iter()`` began that no
        iterator started yet, its own; after a resume, what is left of the resumed epoch; else an
        epoch's (`epoch_batches`)."""
        live = self.pass_state.current
        if live is not None and not live.iterated:  # torch asks once its iterator began the pass
            return len(live)
        if self.pass_state.resuming:
            return len(self.batches()) - self.pass_state.next_start
        return self.epoch_batches()

    def epoch_batches(self) -> int:
        """The batches of a whole epoch of this rank (every rank the same unless ``even_batches=False``)."""
        if not self.even_batches:
            real = real_samples(self.n, world_size=self.world_size, rank=self.rank, split=split_of(self.order))
            return -(-real // self.batch_size)
        return num_batches(self.n, batch_size=self.batch_size, world_size=self.world_size, drop_last=self.drop_last)

    def batches(self, epoch: int | None = None) -> Sequence[np.ndarray]:
        """This rank's batches (index arrays) of an epoch (default: the current one); a keyed
        order gives a lazy sequence, each batch computed when indexed."""
        ps = self.pass_state
        epoch = ps.epoch if epoch is None else epoch
        remaining = ps.remaining if epoch == ps.epoch else None  # a resumed epoch: what was left of it
        out = self._even_batches(epoch, remaining)
        if self.even_batches:
            return out
        length = size(remaining) if remaining is not None else ps.num_samples
        real = real_samples(length, world_size=ps.world_size, rank=ps.rank, split=split_of(ps.order))
        return without_padding(out, real, ps.batch_size)

    def _even_batches(self, epoch: int, remaining: tuple | None) -> Sequence[np.ndarray]:
        ps = self.pass_state
        if remaining is not None:
            return plan_rank_batches(
                remaining,
                ps.order,
                ps.num_samples,
                batch_size=ps.batch_size,
                seed=ps.seed,
                epoch=epoch,
                world_size=ps.world_size,
                rank=ps.rank,
                shuffle=ps.shuffle,
                drop_last=ps.drop_last,
            )
        return rank_batches(
            ps.num_samples,
            batch_size=ps.batch_size,
            seed=ps.seed,
            epoch=epoch,
            world_size=ps.world_size,
            rank=ps.rank,
            shuffle=ps.shuffle,
            drop_last=ps.drop_last,
            order=ps.order,
        )

    def begin_pass(self, why: str = "") -> Pass:
        """The next pass (`PassState.begin`): its epoch's batches, the batch it starts from; whoever
        hands its batches to the consumer reports each with ``deliver()``."""
        return self.pass_state.begin(self.batches, why)

    def __iter__(self):
        """A pass begins now (its state counts from its start), each batch counted delivered as it is
        yielded. A pass no iterator started yet is not begun again: torch's worker iterator calls
        ``iter()`` twice before it pulls, and runs one pass."""
        p = self.pass_state.current
        if p is None or p.iterated:
            p = self.begin_pass("iter(batch_sampler)")
        return self._yield(p)

    @staticmethod
    def _yield(p: Pass):
        p.iterated = True
        for k in range(p.start, len(p.batches)):
            p.deliver()
            yield p.batches[k].tolist()

    def resume_at(self, epoch: int, position: int, remaining=None) -> None:
        """The next pass is epoch ``epoch`` from batch ``position`` (of the plan ``remaining``,
        `hybridload.sampling.resume`; None: the whole epoch)."""
        self.pass_state.resume_at(epoch, position, remaining)

    def state_dict(self) -> dict:
        """Where this rank stands (`PassState.get_state`): any rank at any world size or batch size
        resumes from it."""
        return self.pass_state.get_state()

    def load_state_dict(self, sd: dict, where: str = "DistributedBatchSampler.load_state_dict") -> None:
        """Resume from any rank's ``state_dict()``, saved at any world size and batch size (a
        ``HybridLoader`` state of the same dataset too; `PassState.reset`); a state of another
        dataset, seed or order is refused (`ResumeMismatchError`)."""
        self.pass_state.reset(sd, where)
