"""Per-sample weights (`hybridload.sampling.weighted_order`, `sources.Weighted`): torch's
WeightedRandomSampler's draws with replacement, keyed: the same draws split among any ranks,
exact resume, other weights refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from hybridload.errors import ResumeMismatchError
from hybridload.sampling.sampler import DistributedBatchSampler

from support.resume_helper import check_resume
from test_mix_order import Sized


def weighted_sampler(weights, num_samples, world_size=1, rank=0, bs=16):
    from hybridload.sampling.weighted_order import WeightedOrder, check_weights

    order = WeightedOrder(check_weights(weights, len(weights), "test"), num_samples)
    return DistributedBatchSampler(num_samples, bs, seed=2, rank=rank, world_size=world_size, order=order)


def test_per_sample_weights_draw_with_replacement_in_proportion_and_never_a_zero_weight():
    w = np.array([0.0, 1.0, 3.0, 0.0, 6.0])
    drawn = [i for b in weighted_sampler(w, 20_000) for i in b]
    freq = np.bincount(drawn, minlength=5) / len(drawn)
    assert freq[0] == freq[3] == 0
    assert np.allclose(freq, w / w.sum(), atol=0.015)  # 20,000 draws: 3 standard deviations ~ 0.01


def test_per_sample_weights_draws_are_the_same_split_among_any_ranks_and_resume_exactly():
    w = np.arange(1, 41, dtype=float)
    whole = [i for b in weighted_sampler(w, 120, bs=120) for i in b]
    for world in (2, 3):
        per = [[i for b in weighted_sampler(w, 120, world, r, bs=5) for i in b] for r in range(world)]
        assert [per[p % world][p // world] for p in range(120)] == whole
    check_resume(lambda: weighted_sampler(w, 60, bs=7), key=tuple)
    s = weighted_sampler(w, 60)
    state = s.state_dict()
    w2 = w.copy()
    w2[3] = 9
    with pytest.raises(ResumeMismatchError, match="sample_weights"):
        weighted_sampler(w2, 60).load_state_dict(state)


def test_per_sample_weights_are_checked_naming_the_sample():
    from hybridload.sources import Weighted

    src = Sized(3)
    with pytest.raises(ValueError, match="2 weights for 3 samples"):
        Weighted(src, [1, 2])
    with pytest.raises(ValueError, match="sample 1's weight is -1.0"):
        Weighted(src, [1, -1, 2])
    with pytest.raises(ValueError, match="every weight is 0"):
        Weighted(src, [0, 0, 0])
    assert len(Weighted(src, [1, 1, 1], num_samples=10)) == 10
