"""Elastic resume as pure functions: a *plan* is what is left of an epoch's global order (intervals
of positions) split among any number of ranks by DistributedSampler's rules, so a state saved at one
world size and batch size resumes at another; with the strided split what is left is always a
suffix, one number (the rules: docs/guide/guarantees.md, "Resume").

A worked example: n=10, W=2, batch 2, strided, no shuffle: after one batch per rank, ranks delivered
[0, 2] and [1, 3] and ((4, 10),) is left; resumed at W=4, batch 1, rank 0 gets 4, 8; rank 1 5, 9;
rank 2 6, then 4 again as padding; rank 3 7, 5."""

from __future__ import annotations

import zlib
from typing import Any, Callable, Sequence

import numpy as np

from hybridload.errors import ResumeMismatchError
from hybridload.sampling.sharding import epoch_order, num_batches, samples_per_rank

SPLITS = ("strided", "contiguous")
Intervals = tuple  # of (start, stop) int pairs, in global order


def whole(n: int) -> Intervals:
    """A fresh epoch of ``n`` samples as a plan's ``remaining``."""
    return ((0, int(n)),) if n > 0 else ()


def size(remaining: Intervals) -> int:
    """How many positions ``remaining`` holds."""
    return sum(b - a for a, b in remaining)


def check_remaining(remaining: Any, n: int, where: str) -> Intervals:
    """``remaining`` as saved in a state, checked: increasing, disjoint intervals inside ``[0, n)``."""
    try:
        pairs = tuple((int(a), int(b)) for a, b in remaining)
    except (TypeError, ValueError):
        raise ValueError(
            f"{where}: the state's field 'remaining' must be a list of [start, stop] pairs, got {remaining!r}; pass "
            "the whole dict state_dict() returned"
        ) from None
    last = 0
    for a, b in pairs:
        if not last <= a < b <= n:
            raise ValueError(
                f"{where}: the state's field 'remaining' must hold increasing, disjoint intervals inside [0, {n}), got "
                f"{remaining!r}; pass the whole dict state_dict() returned"
            )
        last = b
    return pairs


def plan_batches(remaining: Intervals, *, batch_size: int, world_size: int, drop_last: bool) -> int:
    """Batches every rank gets from a plan."""
    return num_batches(size(remaining), batch_size=batch_size, world_size=world_size, drop_last=drop_last)


def to_global(remaining: Intervals, q: np.ndarray) -> np.ndarray:
    """The global positions of slots ``q`` (in ``[0, size(remaining))``) of the remainder."""
    starts = np.array([a for a, _ in remaining], dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum([b - a for a, b in remaining])]).astype(np.int64)
    k = np.searchsorted(cum, q, side="right") - 1
    return starts[k] + (q - cum[k])


def rank_slots(
    remaining: Intervals, j: np.ndarray, *, world_size: int, rank: int, drop_last: bool, split: str
) -> np.ndarray:
    """Global positions of rank ``rank``'s samples ``j`` (its ``j``-th sample of the plan)."""
    length = size(remaining)
    per = samples_per_rank(length, world_size, drop_last)
    q = rank + j * world_size if split == "strided" else rank * per + j
    return to_global(remaining, np.asarray(q, dtype=np.int64) % max(length, 1))  # padding: the remainder's start


def remaining_after(
    remaining: Intervals, delivered: int, *, batch_size: int, world_size: int, drop_last: bool, split: str
) -> Intervals:
    """What is left of a plan after every rank delivered ``delivered`` batches of it (all of
    them: nothing, the dropped tail included)."""
    length = size(remaining)
    if delivered >= plan_batches(remaining, batch_size=batch_size, world_size=world_size, drop_last=drop_last):
        return ()
    per = samples_per_rank(length, world_size, drop_last)
    m = min(delivered * batch_size, per)  # samples each rank delivered
    if split == "strided":
        done = [(0, min(m * world_size, length))]
    else:
        done = [(r * per, min(r * per + m, length)) for r in range(world_size) if r * per < length]
    keep, at = [], 0
    for a, b in done + [(length, length)]:
        if a > at:
            keep.append((at, a))
        at = max(at, b)
    return _map(remaining, keep)


def _map(remaining: Intervals, slots: Sequence[tuple[int, int]]) -> Intervals:
    """Slot intervals of the remainder as global intervals (merged where they touch)."""
    out: list[list[int]] = []
    base = 0
    pieces = []
    for a, b in remaining:
        pieces.append((base, base + b - a, a))
        base += b - a
    for lo, hi in slots:
        for s0, s1, g in pieces:
            a, b = max(lo, s0), min(hi, s1)
            if a < b:
                ga, gb = g + a - s0, g + b - s0
                if out and out[-1][1] == ga:
                    out[-1][1] = gb
                else:
                    out.append([ga, gb])
    return tuple((a, b) for a, b in out)


def common_position(states: Sequence[dict]) -> dict:
    """One state for every rank from states saved at different positions of one plan: the smallest
    position (the batches others delivered past it come again).

    Args:
        states: each rank's ``state_dict()`` (a `HybridLoader`'s, a `DistributedBatchSampler`'s
            or the drop-in's), saved in the same epoch of one run.
    """
    if not states:
        raise ValueError("common_position: give the states of the ranks (at least one)")
    keys = ("epoch", "world_size", "batch_size", "seed", "remaining")
    first = states[0]
    for s in states[1:]:
        for key in keys:
            if s.get(key) != first.get(key):
                raise ValueError(
                    f"common_position: the states differ in {key} ({s.get(key)!r} vs "
                    f"{first.get(key)!r}); they were not saved in the same epoch of one run"
                )
    return dict(min(states, key=lambda s: s["position"]))


def position_lookup(order: Any, n: int, *, seed: int, epoch: int, shuffle: bool) -> Callable[[np.ndarray], np.ndarray]:
    """Global positions -> dataset indices for an epoch of a sampler's ``order=`` object (None:
    ``torch.randperm``'s; a ``ShardOrder``; a keyed order)."""
    if hasattr(order, "positions"):  # the keyed shard-aware order
        return lambda p: order.positions(p, seed=seed, epoch=epoch, shuffle=shuffle)
    if getattr(order, "kind", None) == "keyed":
        from hybridload._keyed import derive_key
        from hybridload.sampling._keyed_order import KeyedPermutation

        perm = KeyedPermutation(n, derive_key(seed, epoch)) if shuffle else None
        return (lambda p: perm(p)) if perm is not None else (lambda p: np.asarray(p, dtype=np.int64))
    if order is None:
        full = epoch_order(n, seed, epoch, shuffle)
    elif hasattr(order, "shard_sizes"):
        from hybridload.sampling._shard_order import shard_block_order

        full = shard_block_order(
            order.shard_sizes, seed=seed, epoch=epoch, buffer_shards=order.buffer_shards, shuffle=shuffle
        )
    else:
        raise ValueError(
            f"the order {type(order).__name__} has no global positions: a state saved with it can "
            "resume only with the same world_size and batch_size"
        )
    return lambda p: full[np.asarray(p, dtype=np.int64)]


def order_fingerprint(order: Any) -> str | None:
    """What identifies a shard-aware order's dataset beyond its size: the shards' sizes (a
    checksum) and ``buffer_shards``; None for an order without shards."""
    sizes = getattr(order, "shard_sizes", getattr(order, "sizes", None))
    if sizes is None:
        return None
    crc = zlib.crc32(np.asarray(sizes, dtype=np.int64).tobytes())
    return f"{len(sizes)} shards (sizes crc32 {crc:08x}), buffer_shards={order.buffer_shards}"


def split_of(order: Any) -> str:
    """How an ``order=`` object splits the epoch among ranks: "contiguous" (shard-aware, a
    mixture: its ``split``) or "strided"."""
    if getattr(order, "split", None) in SPLITS:
        return order.split
    return "contiguous" if hasattr(order, "shard_sizes") or hasattr(order, "sizes") else "strided"


def plan_rank_batches(
    remaining: Intervals,
    order: Any,
    n: int,
    *,
    batch_size: int,
    seed: int,
    epoch: int,
    world_size: int,
    rank: int,
    shuffle: bool,
    drop_last: bool,
):
    """Rank ``rank``'s batches of a plan (each computed when indexed), as dataset indices."""
    from hybridload.sampling._keyed_order import RankBatches

    length = size(remaining)
    count = num_batches(length, batch_size=batch_size, world_size=world_size, drop_last=drop_last)
    per = samples_per_rank(length, world_size, drop_last)
    look = position_lookup(order, n, seed=seed, epoch=epoch, shuffle=shuffle)
    split = split_of(order)

    def lookup(j: np.ndarray) -> np.ndarray:
        return look(rank_slots(remaining, j, world_size=world_size, rank=rank, drop_last=drop_last, split=split))

    return RankBatches(count, per, batch_size, lookup)


def resume_plan(
    saved: dict,
    *,
    n: int,
    world_size: int,
    batch_size: int,
    drop_last: bool,
    split: str,
    where: str,
    shards: str | None = None,
) -> tuple[Intervals | None, int]:
    """(remaining, position) for this sampler resuming from ``saved``: the same plan where world
    size and batch size match (None for a fresh epoch's), else a new plan of what is left, from its
    start; a state of other shards is refused."""
    if saved.get("split", split) != split:
        raise ResumeMismatchError("split", saved["split"], split, where)
    if saved.get("shards", shards) != shards:
        raise ResumeMismatchError("shards", saved["shards"], shards, where)
    fresh = saved.get("remaining") is None
    plan = whole(n) if fresh else check_remaining(saved["remaining"], n, where)
    w, b, pos = saved["world_size"], saved["batch_size"], saved["position"]
    count = plan_batches(plan, batch_size=b, world_size=w, drop_last=drop_last)
    if not 0 <= pos <= count:
        raise ValueError(
            f"{where}: the state's field 'position': position must be in [0, {count}] (the batches of the "
            f"saved epoch's plan), got {pos}; pass the dict state_dict() returned, unchanged"
        )
    if (w, b) == (world_size, batch_size):
        return (None if fresh else plan), pos
    return remaining_after(plan, pos, batch_size=b, world_size=w, drop_last=drop_last, split=split), 0


def saved_plan(
    n: int,
    remaining: Intervals | None,
    position: int,
    *,
    world_size: int,
    batch_size: int,
    drop_last: bool,
    split: str,
    shards: str | None = None,
) -> dict:
    """The plan's fields of a state: ``remaining`` (None: a fresh epoch) and ``delivered``, the
    samples of the epoch's global order delivered so far."""
    plan = whole(n) if remaining is None else remaining
    left = remaining_after(
        plan, position, batch_size=batch_size, world_size=world_size, drop_last=drop_last, split=split
    )
    return {
        "remaining": None if remaining is None else [list(p) for p in remaining],
        "delivered": n - size(left),
        "split": split,
        "shards": shards,
    }
