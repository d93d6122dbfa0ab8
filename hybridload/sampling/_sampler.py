"""DistributedBatchSampler: a rank's batches of each epoch as a stateful iterable, resumable
by any rank at any world size and batch size (`hybridload.sampling._resume`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from hybridload.sampling._keyed_shard_order import check_order, keyed_order_for
from hybridload.sampling._pass_state import Pass, PassState, check_epoch
from hybridload.sampling._resume import plan_rank_batches, size, split_of
from hybridload.sampling._uneven import check_even_batches, real_samples, without_padding
from hybridload.sampling.sharding import check_batch_size, check_split, num_batches, rank_batches, resolve_rank


class DistributedBatchSampler:
    """A stateful iterable of this rank's batches (lists of indices), usable as a torch DataLoader
    ``batch_sampler``: ``set_epoch`` as DistributedSampler, ``state_dict`` / ``load_state_dict``
    resume mid-epoch exactly, at any world size and batch size; its place and state are its
    `PassState`.

    Args:
        n: the dataset's length.
        batch_size: samples per batch on this rank.
        seed: the order's key (epoch e's order is ``torch.randperm`` seeded with ``seed + e``).
        shuffle: False keeps the dataset's order.
        drop_last: drop the tail that does not divide evenly among ranks instead of padding.
        rank: this rank; default as `resolve_rank`.
        world_size: the number of ranks; default as `resolve_rank`.
        order: "randperm" (the default), "keyed" (the same split, computed batch by batch), or a
            source's ``sample_order()``; None: "randperm".
        fingerprint: what identifies the dataset beyond its size, for its saved states.
        even_batches: True: every rank the same number of batches, padded; False: each sample once
            across the ranks, for evaluation.
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
        """The next pass is epoch ``epoch`` from its start, or from the resume point right after a
        resume into it; an int in [0, 2**63)."""
        self.pass_state.set_epoch(check_epoch(epoch, where="DistributedBatchSampler.set_epoch"))

    def __len__(self) -> int:
        """The batches the next iterator yields: of a pass begun that no iterator started, its own;
        after a resume, what is left; else an epoch's."""
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
        """A pass begins now, each batch counted delivered as it is yielded; a pass no iterator
        started is not begun again, since torch's worker iterator calls ``iter()`` twice before it
        pulls."""
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
        `hybridload.sampling._resume`; None: the whole epoch)."""
        self.pass_state.resume_at(epoch, position, remaining)

    def state_dict(self) -> dict:
        """Where this rank stands (`PassState.get_state`): any rank at any world size or batch size
        resumes from it."""
        return self.pass_state.get_state()

    def load_state_dict(self, sd: dict, where: str = "DistributedBatchSampler.load_state_dict") -> None:
        """Resume from any rank's ``state_dict()``, at any world size and batch size; a state of
        another dataset, seed or order is refused (`ResumeMismatchError`)."""
        self.pass_state.reset(sd, where)
