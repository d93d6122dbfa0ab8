"""Keyed randomness: every draw in hybridload comes from a ``numpy.random.SeedSequence`` whose
entropy is (the seed, as 64 bits, then a key such as epoch and sample index), optionally on its
own stream (``spawn_key``). A pure function of its arguments: the same key gives the same draws
in every lane, process and run."""

from __future__ import annotations

import numpy as np

SEED_BITS = 0xFFFFFFFFFFFFFFFF


def seed_sequence(seed: int, *key: int, spawn_key: tuple[int, ...] = ()) -> np.random.SeedSequence:
    """The SeedSequence of (``seed`` as 64 bits, ``*key``) on stream ``spawn_key``."""
    return np.random.SeedSequence((int(seed) & SEED_BITS, *(int(k) for k in key)), spawn_key=spawn_key)


def keyed_generator(seed: int, *key: int, spawn_key: tuple[int, ...] = ()) -> np.random.Generator:
    """A PCG64 generator on `seed_sequence`."""
    return np.random.Generator(np.random.PCG64(seed_sequence(seed, *key, spawn_key=spawn_key)))
