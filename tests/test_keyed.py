"""Keyed randomness (`hybridload._keyed`): the values it derives are pinned, and it is the one place
the package derives them.

The pinned numbers below were computed by the code as it stood before the keyed derivations
moved into one module (the epoch orders' ``derive_key`` in ``sampling/_keyed_order.py``, the
recipe's ``SeedSequence`` keys in ``recipe/keys.py``). They pin compatibility: saved states and
plan files name positions in these orders, and a resumed or rerun job must see the same samples,
the same crops and the same batch-hook draws; a change to any of them breaks every saved state.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from hybridload.delivery._batch_hook import batch_seed
from hybridload._keyed import KeyedGenerators, derive_key, keyed_generator, pcg64_states, seed_sequence
from hybridload.recipe._core import sample_generator
from hybridload.recipe._custom import custom_generator
from hybridload.recipe._photometric import erase_generator
from hybridload.sampling._keyed_order import KeyedOrder, KeyedPermutation
from hybridload.sampling._keyed_shard_order import KeyedShardOrder
from hybridload.sampling._mix_order import MixOrder
from hybridload.sampling._shard_order import shard_block_order
from hybridload.sampling._weighted_order import WeightedOrder

PACKAGE = Path(__file__).resolve().parents[1] / "hybridload"


@pytest.mark.parametrize(
    ("parts", "key"),
    [
        ((), 237712456528108844),
        ((0, 0), 6359013107195829869),
        ((7, 3), 9358065567651037442),
        ((-1, 0), 928784039198093343),
        ((2**70 + 5, 1), 13751978236956225012),
        ((0, 0, 0x6D6978, 2), 2492041556430790990),
    ],
)
def test_derived_keys_are_the_ones_saved_states_were_made_with(parts, key):
    assert derive_key(*parts) == key


def test_keyed_generators_draw_what_saved_states_and_plans_were_made_with():
    assert keyed_generator(3, 1, 4).integers(0, 2**32, 4).tolist() == [1536475300, 3098328015, 1174551531, 3934423137]
    assert keyed_generator(-1, 2**33, 5, spawn_key=(9, 2)).integers(0, 2**32, 3).tolist() == [
        2819208274,
        3048599819,
        426047305,
    ]
    assert seed_sequence(0, 1, 2, spawn_key=(7,)).generate_state(2, np.uint64).tolist() == [
        12945263330907076063,
        9053860094026904189,
    ]
    assert pcg64_states(11, (2,), [0, 5, 2**32 - 1]) == [
        (195706889482132272575996698693918976626, 193839112720280761453093402455930136077),
        (316534787190595117279676768784753908666, 254208247404430655732047043526348952681),
        (324763213438947604643131772553827234587, 195269178938620507954070083462638550375),
    ]
    gens = KeyedGenerators(0, (1,), [2])
    assert gens.generator(0).integers(0, 2**32, 3).tolist() == [2384177762, 3786887862, 1259353270]


def test_recipe_and_batch_hook_draws_are_the_ones_saved_states_were_made_with():
    assert sample_generator(0, 1, 2).integers(0, 2**32, 3).tolist() == [2384177762, 3786887862, 1259353270]
    assert custom_generator(0, 1, 2, 3).integers(0, 2**32, 3).tolist() == [3520077036, 2947608745, 508357742]
    assert erase_generator(0, 1, 2).integers(0, 2**32, 3).tolist() == [1758221968, 2409016813, 1992215012]
    assert batch_seed(0, 1, 2, 3) == 6793538102690747611
    assert batch_seed(2**63 + 5, 0, 0, 0) == 4116761993580715006


def test_epoch_orders_are_the_ones_saved_states_were_made_with():
    kw = dict(seed=3, epoch=1, world_size=2, rank=1, shuffle=True, drop_last=False)
    assert KeyedPermutation(12, derive_key(5, 1))(np.arange(12)).tolist() == [6, 4, 2, 1, 8, 10, 7, 5, 11, 3, 9, 0]
    assert KeyedOrder().rank_batches(13, batch_size=4, **kw)[1].tolist() == [10, 5, 3]
    assert KeyedShardOrder([3, 5, 2, 4], buffer_shards=2).rank_batches(14, batch_size=4, **kw)[0].tolist() == [
        0,
        10,
        1,
        13,
    ]
    weighted = WeightedOrder(np.array([1.0, 2.0, 0.0, 5.0]), 10)
    assert weighted.positions(np.arange(10), seed=3, epoch=1).tolist() == [3, 0, 3, 3, 0, 0, 3, 3, 3, 3]
    mix = MixOrder([5, 4], [6, 3], [KeyedOrder(), KeyedShardOrder([2, 2], buffer_shards=1)], [0, 5])
    assert mix.positions(np.arange(9), seed=3, epoch=1, shuffle=True).tolist() == [2, 1, 7, 0, 4, 2, 7, 3, 8]
    assert shard_block_order([3, 3, 2, 4], seed=5, epoch=2, buffer_shards=2).tolist() == [
        11,
        7,
        8,
        10,
        9,
        6,
        2,
        1,
        5,
        0,
        4,
        3,
    ]


# A keyed derivation of its own: a SeedSequence, a seeded numpy generator, splitmix64's constant.
# The CLI's synthetic demo photos draw from a plain seeded generator: they are no loader stream.
DERIVATION = re.compile(r"SeedSequence\(|default_rng\(|0xBF58476D1CE4E5B9", re.IGNORECASE)
NOT_A_STREAM = ("cli/",)


def test_keyed_randomness_is_derived_in_the_keyed_module_only():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "_keyed.py" or rel.startswith(NOT_A_STREAM):
            continue
        offenders += [
            f"{rel}:{k}" for k, line in enumerate(path.read_text().splitlines(), 1) if DERIVATION.search(line)
        ]
    assert not offenders, f"derive keyed randomness through hybridload._keyed: {offenders}"
