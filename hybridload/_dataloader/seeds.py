"""What a drop-in pass draws from the loader's ``generator`` before it starts, in torch's order: the
base seed after the sampler's iterator, none for a persistent iterator, and a DataPipe's shared seed
first in a first pass (torch's ``_reset`` then draws one its workers never see), after the sampler
in a later one."""

from __future__ import annotations

from typing import Iterable, Iterator, NamedTuple

import torch
import torch.utils.data as tud


class Drawn(NamedTuple):
    """What a pass draws before it starts."""

    batches: Iterator
    base_seed: int
    shared_seed: int | None
    seeds: tuple[int, int]  # (the pool's base seed, the passes it ran before this one)


def draw_seed(generator: torch.Generator | None) -> int:
    """One seed drawn as torch's iterator draws its base seed."""
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


def draw(
    dataset: object,
    sampler: Iterable,
    generator: torch.Generator | None,
    seeds: tuple[int, int],
    first: bool,
) -> Drawn:
    """A pass's sampler iterator and seeds; ``seeds``: the pool's from its last pass, which a
    persistent pool counts on from."""
    datapipe = isinstance(dataset, tud.IterDataPipe)
    shared = draw_seed(generator) if datapipe and first else None
    batches = iter(sampler)
    if first:
        base_seed = draw_seed(generator)
        seeds = (base_seed, 0)
        if datapipe:
            draw_seed(generator)
    else:
        seeds = (seeds[0], seeds[1] + 1)
        shared = draw_seed(generator) if datapipe else None
    return Drawn(batches, seeds[0], shared, seeds)
