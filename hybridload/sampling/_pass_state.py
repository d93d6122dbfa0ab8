"""`PassState`, the one owner of where a rank's pass is and of its saved state (as torchdata.nodes'
``get_state`` / ``reset``), so the loader, the sampler and the drop-in count and check states in one
place; `begin` hands out each pass as a `Pass` handle that a newer pass or a load supersedes. How
epochs follow across passes: docs/guide/guarantees.md, "Epochs"."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any, Callable

from hybridload.errors import OrderMismatchError, ResumeMismatchError
from hybridload.sampling._keyed_shard_order import order_kind
from hybridload.sampling._mix_order import check_mixture, mixture_fields
from hybridload.sampling._resume import order_fingerprint, resume_plan, saved_plan, split_of
from hybridload.sampling.sharding import BATCH_SIZE_MAX

VERSION = 1
#: the epoch's order is seeded with seed + epoch, which torch takes in 64 bits
EPOCH_MAX = 2**63 - 1

#: the fields every state holds; "order", "source" and the plan's fields (saved_plan) are optional
#: on load, for older states
STATE_FIELDS: dict[str, type] = {
    "version": int,
    "epoch": int,
    "position": int,
    "seed": int,
    "shuffle": bool,
    "drop_last": bool,
    "batch_size": int,
    "world_size": int,
    "rank": int,
    "num_samples": int,
}
#: the fields that must equal the resuming pass's own (the others may differ: elastic resume)
SAME = ("seed", "num_samples", "shuffle", "drop_last")


def is_int(v: Any) -> bool:
    """An integer (Python or numpy) that is not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def check_epoch(epoch: Any, where: str = "set_epoch") -> int:
    """An epoch: an int in [0, 2**63), since the order is seeded with seed + epoch, which torch
    takes in 64 bits."""
    if not is_int(epoch):
        raise TypeError(f"{where}: epoch must be an int >= 0, got {epoch!r} ({type(epoch).__name__})")
    if epoch < 0:
        raise ValueError(
            f"{where}: epoch must be an int >= 0, got {epoch}; count epochs from 0 (e.g. set_epoch(0) for the first)"
        )
    if epoch > EPOCH_MAX:
        raise ValueError(
            f"{where}: epoch must be below 2**63, got {epoch} (the epoch's order is seeded with "
            "seed + epoch, which torch takes in 64 bits); count epochs from 0, or pass epoch % 2**63"
        )
    return int(epoch)


#: the key the drop-in DataLoader's states were wrapped under before they took this one shape
WRAPPED = "batch_sampler"


def upgraded(state: Mapping) -> dict:
    """A state in today's format: a drop-in state wrapped as ``{"batch_sampler": state}`` is its
    inner state, and an older sampler state (``n``, no ``version``) is read as version 1."""
    if set(state) == {WRAPPED} and isinstance(state[WRAPPED], Mapping):
        state = state[WRAPPED]
    out = dict(state)
    if "n" in out and "num_samples" not in out:
        out["num_samples"] = out.pop("n")
        out.setdefault("version", VERSION)
    return out


def check_state(state: Any, where: str) -> dict:
    """``state`` upgraded, after checking it is a whole state of this version, each field of its
    kind; what it must match is `PassState.reset`'s."""
    if not isinstance(state, Mapping):
        raise TypeError(f"{where}: state must be the dict state_dict() returned, got {type(state).__name__}")
    state = upgraded(state)
    missing = [k for k in STATE_FIELDS if k not in state]
    if missing:
        raise ValueError(f"{where}: the state lacks {', '.join(missing)}; pass the whole dict state_dict() returned")
    for key, kind in STATE_FIELDS.items():
        v = state[key]
        if not (isinstance(v, bool) if kind is bool else is_int(v)):
            raise TypeError(
                f"{where}: the state's field {key!r}: {key} must be {'a bool' if kind is bool else 'an int'}, "
                f"got {v!r} ({type(v).__name__}); {UNCHANGED}"
            )
    if state["version"] != VERSION:
        raise ValueError(
            f"{where}: state version {state['version']!r} is not {VERSION}; it was saved by another hybridload version"
        )
    check_epoch(state["epoch"], where=f"{where}: field 'epoch'")
    problem = field_problem(state)
    if problem is not None:
        key, what = problem
        raise ValueError(
            f"{where}: the state's field {key!r} is {state[key]!r}, but {what}: the state, not this "
            f"{where.split('.')[0]}, holds the bad value; {UNCHANGED}"
        )
    return state


#: what a message about a damaged state tells the user to write
UNCHANGED = "pass the dict state_dict() returned, unchanged"


def field_problem(state: Mapping) -> tuple[str, str] | None:
    """The first int field of a state out of the range `PassState.get_state` writes, with that range
    in words; None when all are in range. Pure."""
    if state["num_samples"] < 0:
        return "num_samples", "a dataset size is >= 0"
    if not 1 <= state["batch_size"] <= BATCH_SIZE_MAX:
        return "batch_size", "a batch size is a positive int up to 2**63 - 1"
    if state["world_size"] < 1:
        return "world_size", "a world size is a positive int"
    if not 0 <= state["rank"] < state["world_size"]:
        return "rank", f"a rank is in [0, world_size={state['world_size']})"
    return None


class Pass:
    """One pass over an epoch, as `PassState.begin` hands it out.

    Attributes:
        id: the pass's number (1 for the first of its `PassState`).
        epoch: the epoch it runs.
        start: the batch of the epoch it starts from (a resume point, else 0).
        batches: the epoch's batches (index arrays) it runs, from ``start`` on.
        delivered: its batches that reached the consumer (`deliver`).
        iterated: an iterator of its batches started (``DistributedBatchSampler.__iter__``).
        superseded_by: what superseded it, in words (a newer pass, a load); None while it is the live pass.
    """

    def __init__(self, id: int, epoch: int, start: int, batches: Sequence = ()):
        self.id, self.epoch, self.start, self.batches = id, epoch, start, batches
        self.delivered = 0
        self.superseded_by: str | None = None
        self.iterated = False  # an iterator started on it: a later iter() begins the next pass instead

    @property
    def position(self) -> int:
        """The batch of the epoch it delivers next."""
        return self.start + self.delivered

    def __len__(self) -> int:
        """The batches it runs (those of its epoch from ``start``)."""
        return max(0, len(self.batches) - self.start)

    def deliver(self) -> int | None:
        """One more batch reached the consumer: its place in the epoch; None once superseded, as the
        state then belongs to the newer pass or the load."""
        if self.superseded_by is not None:
            return None
        self.delivered += 1
        return self.position - 1

    def supersede(self, by: str) -> None:
        """A newer pass or a load took over (``by``, in words); the first cause is kept."""
        if self.superseded_by is None:
            self.superseded_by = by


class PassState:
    """Where this rank's pass is: the epoch, the batches delivered of it, the plan left by a resume.

    Args:
        num_samples: the dataset's length.
        batch_size: samples per batch on this rank.
        seed, shuffle, drop_last: the epoch order's settings (DistributedSampler's).
        rank, world_size: this rank and the number of ranks.
        order: a source's ``sample_order()`` (None: DistributedSampler's order).
        fingerprint: what identifies the dataset beyond its size (``Source.fingerprint``), asked
            when a state is saved or loaded; None: nothing to check.
    """

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        *,
        seed: int,
        shuffle: bool,
        drop_last: bool,
        rank: int,
        world_size: int,
        order: Any = None,
        fingerprint: Callable[[], str | None] | None = None,
    ):
        self.num_samples, self.batch_size, self.seed = num_samples, batch_size, seed
        self.shuffle, self.drop_last, self.rank, self.world_size = shuffle, drop_last, rank, world_size
        self.order, self._fingerprint = order, fingerprint
        self.epoch = 0
        self.remaining = None  # a resumed epoch's plan (sampling.resume); None: the whole epoch
        self.live: Pass | None = None  # the newest pass begun
        # the batch of self.epoch the next pass starts from (first pass, set_epoch, resume); None:
        # the live pass is where the state is, and the next pass runs the epoch after it
        self._next: int | None = 0
        self._begun = 0  # passes begun: the next one's id

    @property
    def current(self) -> Pass | None:
        """The live pass while the state is its place; None once `set_epoch` or a resume chose the next pass."""
        return self.live if self._next is None else None

    @property
    def position(self) -> int:
        """Batches of the epoch delivered to the consumer: the live pass's place, or where the chosen next pass starts."""
        live = self.current
        return live.position if live is not None else self.next_start

    @property
    def resuming(self) -> bool:
        """The next pass continues a resumed epoch (from a saved position or plan)."""
        return self._next is not None and (self.remaining is not None or self._next > 0)

    @property
    def next_start(self) -> int:
        """The batch the next pass starts from."""
        return self._next or 0

    def set_epoch(self, epoch: int) -> None:
        """The next pass is epoch ``epoch``, from its start; right after a resume into that same
        epoch, from the resume point (the usual ``load_state_dict`` then ``set_epoch(saved_epoch)``)."""
        if int(epoch) != self.epoch or self._next is None:
            self._next, self.remaining = 0, None
        self.epoch = int(epoch)

    def begin(self, batches: Callable[[int], Sequence] | None = None, why: str = "") -> Pass:
        """A pass begins and supersedes the live one (``why``: for its message), starting at the
        resume point; without a ``set_epoch`` or resume since the last pass the epoch advances by
        one first. ``batches(epoch)``: the epoch's batches."""
        if self._next is None:
            self.epoch += 1
            self.remaining = None
        start, self._next = self._next or 0, None
        self._begun += 1
        if self.live is not None:
            self.live.supersede(f"pass {self._begun}" + (f" ({why})" if why else ""))
        self.live = Pass(self._begun, self.epoch, start, batches(self.epoch) if batches is not None else ())
        return self.live

    def resume_at(self, epoch: int, position: int, remaining=None, why: str = "a resume") -> None:
        """The next pass is epoch ``epoch`` from batch ``position`` of the plan ``remaining``
        (None: the whole epoch); the live pass is superseded (``why``)."""
        self.epoch, self.remaining = int(epoch), remaining
        self._next = int(position)
        if self.live is not None:
            self.live.supersede(why)

    def fingerprint(self) -> str | None:
        return self._fingerprint() if self._fingerprint is not None else None

    def get_state(self, position: int | None = None) -> dict:
        """The state after ``position`` batches of the epoch (default: those delivered): any rank,
        at any world size and batch size, resumes from it."""
        position = self.position if position is None else position
        split = split_of(self.order)
        plan = saved_plan(
            self.num_samples,
            self.remaining,
            position,
            world_size=self.world_size,
            batch_size=self.batch_size,
            drop_last=self.drop_last,
            split=split,
            shards=order_fingerprint(self.order),
        )
        return {
            "version": VERSION,
            "epoch": self.epoch,
            "position": position,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "batch_size": self.batch_size,
            "world_size": self.world_size,
            "rank": self.rank,
            "num_samples": self.num_samples,
            "order": order_kind(self.order),
            "source": self.fingerprint(),
            **plan,
            **mixture_fields(self.order),
        }

    def reset(self, state: Any, where: str, why: str = "load_state_dict()") -> None:
        """Resume from any rank's `get_state`, at any world size and batch size; another dataset,
        seed, order or setting is refused, and nothing changes until the whole state was checked."""
        state = check_state(state, where)
        saved, mine = state.get("order", "randperm"), order_kind(self.order)  # older states: randperm
        if saved != mine:
            raise OrderMismatchError(saved, mine, where)
        check_mixture(state, self.order, where)  # first: another mixture's epoch length is named as such
        for key in SAME:
            if state[key] != getattr(self, key):
                raise ResumeMismatchError(key, state[key], getattr(self, key), where)
        saved_source, fingerprint = state.get("source"), self.fingerprint()
        if saved_source is not None and fingerprint is not None and saved_source != fingerprint:
            # another dataset of the same size (a manifest rewritten with its shards reordered or replaced)
            raise ResumeMismatchError("source", saved_source, fingerprint, where)
        remaining, position = resume_plan(
            state,
            n=self.num_samples,
            world_size=self.world_size,
            batch_size=self.batch_size,
            drop_last=self.drop_last,
            split=split_of(self.order),
            where=where,
            shards=order_fingerprint(self.order),
        )
        self.resume_at(state["epoch"], position, remaining, why=why)
