"""DistributedBatchSampler: a rank's batches of each epoch as a stateful iterable, resumable
by any rank at any world size and batch size (`hybridload.sampling.resume`)."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hybridload.errors import OrderMismatchError, ResumeMismatchError
from hybridload.sampling.resume import order_fingerprint, plan_rank_batches, resume_plan, saved_plan, split_of
from hybridload.sampling.sharding import check_split, num_batches, rank_batches, resolve_rank


class DistributedBatchSampler:
    """A stateful iterable of this rank's batches (lists of indices), usable as a torch
    DataLoader ``batch_sampler``. ``set_epoch`` like DistributedSampler; ``state_dict``
    / ``load_state_dict`` resume mid-epoch exactly.

    Epochs across passes (as Mosaic streaming; torch's DataLoader(shuffle=True) also
    reshuffles every pass):

    * a new pass without ``set_epoch`` advances the epoch by one;
    * ``set_epoch(e)`` always wins: the next pass is epoch e from its start, however many
      passes ran before (``set_epoch(5)`` before each of two passes gives epoch 5 twice);
    * a resumed pass (``load_state_dict`` / ``resume_at``) continues the saved epoch, also
      when ``set_epoch`` names that epoch before the pass;
    * the first pass is epoch 0 (or what ``set_epoch`` / a resume chose).

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
        order: a source's ``sample_order()`` (e.g. the shard-aware order of ``TarShards(read="shard")``);
            None for DistributedSampler's order.
    """

    def __init__(self, n: int, batch_size: int, *, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = False, rank: int | None = None, world_size: int | None = None, order: Any = None):
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self.order = order  # a source's sample_order(); None: DistributedSampler's
        check_split(n, batch_size, self.world_size, self.rank)
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.shuffle, self.drop_last = shuffle, drop_last
        self.epoch = 0
        self._pos = 0          # batches handed out by the live iterator
        self._resume = 0       # where the next iterator starts
        self._chosen = True    # the next pass runs self.epoch as it is (set_epoch, a resume, or the first)
        self._remaining = None  # a resumed epoch's plan (sampling.resume); None: the whole epoch
        self._prepared = None   # a pass begun by prepare_pass(), taken by the next __iter__

    def set_epoch(self, epoch: int) -> None:
        """The next pass is epoch ``epoch``, from its start; right after a resume into that
        same epoch, from the resume point (the usual ``load_state_dict`` then
        ``set_epoch(saved_epoch)`` loop keeps its place)."""
        if int(epoch) != self.epoch or not self._chosen:
            self._resume = self._pos = 0
            self._remaining = None
        self.epoch = int(epoch)
        self._chosen = True
        self._prepared = None

    def __len__(self) -> int:
        """The batches the next ``iter()`` yields (torch's meaning): after a resume, what is left
        of the resumed epoch; else an epoch's (`epoch_batches`)."""
        if self._prepared is not None:
            return len(self._prepared[0]) - self._prepared[1]
        if self._chosen and (self._remaining is not None or self._resume):
            return len(self.batches()) - self._resume
        return self.epoch_batches()

    def epoch_batches(self) -> int:
        """The batches of a whole epoch of this rank (every rank the same)."""
        return num_batches(self.n, batch_size=self.batch_size, world_size=self.world_size,
                           drop_last=self.drop_last)

    @property
    def position(self) -> int:
        """Batches of the current epoch delivered so far (where a resume would start)."""
        return self._pos

    def batches(self, epoch: int | None = None) -> Sequence[np.ndarray]:
        """This rank's batches (index arrays) of an epoch (default: the current one); a keyed
        order gives a lazy sequence, each batch computed when indexed."""
        epoch = self.epoch if epoch is None else epoch
        if self._remaining is not None and epoch == self.epoch:  # a resumed epoch: what was left of it
            return plan_rank_batches(self._remaining, self.order, self.n, batch_size=self.batch_size, seed=self.seed,
                                     epoch=epoch, world_size=self.world_size, rank=self.rank, shuffle=self.shuffle,
                                     drop_last=self.drop_last)
        return rank_batches(self.n, batch_size=self.batch_size, seed=self.seed,
                            epoch=epoch, world_size=self.world_size,
                            rank=self.rank, shuffle=self.shuffle, drop_last=self.drop_last, order=self.order)

    def begin_pass(self) -> tuple[Sequence[np.ndarray], int]:
        """The batches of the epoch this pass runs and the position it starts from (the
        resume point, used up by this call). Without a ``set_epoch`` or a resume since the
        previous pass began, the epoch advances by one first."""
        if not self._chosen:
            self.epoch += 1
            self._resume = 0
            self._remaining = None
        self._chosen = False
        start, self._resume = self._resume, 0
        self._pos = start
        return self.batches(), start

    def mark_delivered(self) -> None:
        """One more batch of the pass reached the consumer."""
        self._pos += 1

    def resume_at(self, epoch: int, position: int, remaining=None) -> None:
        """The next pass is epoch ``epoch`` from batch ``position`` (of the plan ``remaining``,
        `hybridload.sampling.resume`; None: the whole epoch)."""
        self.epoch = int(epoch)
        self._remaining, self._prepared = remaining, None
        self._pos = self._resume = int(position)
        self._chosen = True

    def prepare_pass(self) -> int:
        """Begin the next pass now (what ``__iter__`` does when first advanced) and return the
        batch it starts from; the next ``iter()`` runs that pass. A loader that counts the batches
        it delivers (the drop-in) knows its place from here, whatever its workers pull ahead."""
        self._prepared = self.begin_pass()
        return self._prepared[1]

    def __iter__(self):
        prepared, self._prepared = self._prepared, None
        batches, start = prepared if prepared is not None else self.begin_pass()
        for k in range(start, len(batches)):
            self.mark_delivered()
            yield batches[k].tolist()

    def plan_state(self, position: int | None = None) -> dict:
        """The plan's fields of a state after ``position`` batches (default: the sampler's own):
        `saved_plan`."""
        return saved_plan(self.n, self._remaining, self._pos if position is None else position,
                          world_size=self.world_size, batch_size=self.batch_size, drop_last=self.drop_last,
                          split=split_of(self.order), shards=order_fingerprint(self.order))

    def resume_from(self, state: dict, where: str) -> None:
        """Resume from a state saved by any rank at any world size and batch size (its ``epoch``,
        ``position``, ``world_size``, ``batch_size``, ``remaining``):
        `resume_plan`."""
        remaining, position = resume_plan(state, n=self.n, world_size=self.world_size, batch_size=self.batch_size,
                                          drop_last=self.drop_last, split=split_of(self.order), where=where,
                                          shards=order_fingerprint(self.order))
        self.resume_at(state["epoch"], position, remaining)

    def state_dict(self) -> dict:
        """Where this rank stands: any rank at any world size or batch size resumes from it."""
        return self.state_at(self._pos)

    def state_at(self, position: int) -> dict:
        """The state after ``position`` batches of the current pass reached the consumer."""
        plan = self.plan_state(position)
        return {"epoch": self.epoch, "position": position, "seed": self.seed, "n": self.n,
                "world_size": self.world_size, "rank": self.rank, "batch_size": self.batch_size,
                "shuffle": self.shuffle, "drop_last": self.drop_last,
                "order": getattr(self.order, "kind", "randperm"), **plan}

    def load_state_dict(self, sd: dict) -> None:
        """Resume from any rank's ``state_dict()``, saved at any world size and batch size (a
        ``HybridLoader`` state of the same dataset too); a state of another dataset, seed or
        order is refused (`ResumeMismatchError`)."""
        where = "DistributedBatchSampler.load_state_dict"
        size_key = check_fields(sd, where)
        for key, mine in (("seed", self.seed), (size_key, self.n), ("shuffle", self.shuffle),
                          ("drop_last", self.drop_last)):
            if sd[key] != mine:
                raise ResumeMismatchError(key, sd[key], mine, where)
        saved, mine = sd.get("order", "randperm"), getattr(self.order, "kind", "randperm")  # older states: randperm
        if saved != mine:
            raise OrderMismatchError(saved, mine, where)
        self.resume_from(sd, where)


#: the fields a state holds, with their kinds (the dataset size: ``n``, ``num_samples`` in a HybridLoader's)
STATE_INTS = ("epoch", "position", "seed", "world_size", "batch_size")
STATE_BOOLS = ("shuffle", "drop_last")


def check_fields(sd: Any, where: str) -> str:
    """Check that ``sd`` holds every field of a state, each of its kind, as HybridLoader checks
    its own; returns the key of its dataset size (``n``, or a HybridLoader's ``num_samples``)."""
    if not isinstance(sd, Mapping):
        raise TypeError(f"{where}: state must be the dict state_dict() returned, got {type(sd).__name__}")
    size_key = "num_samples" if "n" not in sd and "num_samples" in sd else "n"
    missing = [k for k in (*STATE_INTS[:3], size_key, *STATE_INTS[3:], *STATE_BOOLS) if k not in sd]
    if missing:
        hint = (" (this is a DataLoader's state: pass its ['batch_sampler'] entry)" if "batch_sampler" in sd
                else "")
        raise ValueError(f"{where}: the state lacks {', '.join(missing)}; pass the whole dict state_dict() "
                         f"returned{hint}")
    for key in (*STATE_INTS, size_key):
        if not isinstance(sd[key], numbers.Integral) or isinstance(sd[key], bool):
            raise TypeError(f"{where}: {key} must be an int, got {sd[key]!r} ({type(sd[key]).__name__})")
    for key in STATE_BOOLS:
        if not isinstance(sd[key], bool):
            raise TypeError(f"{where}: {key} must be a bool, got {sd[key]!r} ({type(sd[key]).__name__})")
    if sd["epoch"] < 0:
        raise ValueError(f"{where}: epoch must be an int >= 0, got {sd['epoch']}; pass the dict state_dict() "
                         "returned")
    return size_key
