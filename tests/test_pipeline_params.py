"""The DALI chain's per-sample inputs, read from typed ops (pure; no DALI needed)."""

import numpy as np
import pytest

from hybridload.recipe import _ops as ops
from hybridload import recipe as R
from hybridload._pipelines import chain_params


def params(*op_list):
    return R.SampleParams(tuple(op_list), ("x",) * len(op_list), (0, 0))


def test_crop_resize_flip_map_onto_crop1_resize_and_mirror():
    p = chain_params(params(ops.Crop(3, 4, 50, 40), ops.Resize(24, 32), ops.Flip()), 100, 80)
    np.testing.assert_array_equal(p.anchor1, [3, 4])
    np.testing.assert_array_equal(p.shape1, [50, 40])
    np.testing.assert_array_equal(p.size, [24, 32])
    np.testing.assert_array_equal(p.anchor2, [0, 0])
    np.testing.assert_array_equal(p.shape2, [32, 24])
    assert int(p.flip) == 1


def test_resize_then_crop_maps_the_crop_after_the_resize():
    rec = R.imagenet_eval(224)
    p = chain_params(rec.sample_params(0, 0, 0, 500, 375), 500, 375)
    np.testing.assert_array_equal(p.shape1, [500, 375])  # no first crop: the whole image
    np.testing.assert_array_equal(p.size, [256, 341])
    np.testing.assert_array_equal(p.anchor2, [58, 16])
    np.testing.assert_array_equal(p.shape2, [224, 224])
    assert int(p.flip) == 0


def test_ops_outside_the_chain_are_refused():
    with pytest.raises(ValueError, match="do not fit the chain"):
        chain_params(params(ops.Resize(10, 10), ops.Resize(5, 5)), 20, 20)
    with pytest.raises(ValueError, match="cannot pad"):
        chain_params(params(ops.Crop(-2, 0, 10, 10)), 20, 20)
    with pytest.raises(ValueError, match="no step for"):
        chain_params(params(object()), 20, 20)
