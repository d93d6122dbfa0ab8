"""Passes over a loader across epochs."""

from __future__ import annotations

from typing import Any, Iterator


def endless(loader) -> Iterator[Any]:
    """The loader's batches across epochs, without end, advancing ``set_epoch`` after each pass;
    ValueError when it has no batches."""
    if len(loader) == 0:
        raise ValueError("endless: the loader has no batches for this rank")
    epoch = loader.epoch
    while True:
        yield from loader
        epoch += 1
        loader.set_epoch(epoch)
