"""TrivialAugmentWide with torchvision's bins and draw order, over the colour ops every engine
computes from one formula (which are left out and why: docs/guide/recipes.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybridload.recipe import _ops as O
from hybridload.recipe._photometric import HW, Rng

NUM_BINS = 31


#: (name, magnitudes or None, signed, op of a magnitude) in torchvision's order.
OPS = (
    ("Identity", None, False, lambda m: O.Brightness(1.0)),
    ("Brightness", np.linspace(0.0, 0.99, NUM_BINS), True, lambda m: O.Brightness(1.0 + m)),
    ("Color", np.linspace(0.0, 0.99, NUM_BINS), True, lambda m: O.Saturation(1.0 + m)),
    ("Contrast", np.linspace(0.0, 0.99, NUM_BINS), True, lambda m: O.Contrast(1.0 + m)),
    (
        "Posterize",
        8 - np.round(np.arange(NUM_BINS) / ((NUM_BINS - 1) / 6)).astype(int),
        False,
        lambda m: O.Posterize(int(m)),
    ),
    ("Solarize", np.linspace(255.0, 0.0, NUM_BINS), False, lambda m: O.Solarize(float(m))),
    ("AutoContrast", None, False, lambda m: O.AutoContrast()),
)
OP_NAMES = tuple(name for name, *_ in OPS)


@dataclass(frozen=True)
class TrivialAugmentWide:
    """One op per sample from `OP_NAMES` with a random magnitude (torchvision's bins).

    Always emits exactly one op (Identity is ``Brightness(1.0)``, which changes nothing).
    """

    def sample_ops(self, hw: HW, rng: Rng) -> tuple[tuple[O.Op, ...], HW]:
        g = rng()
        name, mags, signed, make = OPS[int(g.integers(len(OPS)))]
        m = 0.0 if mags is None else float(mags[int(g.integers(len(mags)))])
        if signed and g.integers(2):
            m = -m
        return (make(m),), hw

    def op_slots(self) -> tuple[O.Slot, ...]:
        """One slot: the op types of `OPS` (Identity is a Brightness), in their first order."""
        return (O.Slot(tuple(dict.fromkeys(type(make(1.0)) for _, _, _, make in OPS))),)


__all__ = ["TrivialAugmentWide", "OP_NAMES", "NUM_BINS"]
