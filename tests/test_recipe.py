import math
import warnings

import numpy as np
import pytest

from hybridload import recipe as R
from hybridload.recipe._core import sample_generators
from hybridload.recipe._ops import Crop, Flip, Resize


def test_sample_params_depend_only_on_seed_epoch_index():
    rec = R.imagenet_train(224)
    a = rec.sample_params(0, 3, 17, 500, 375)
    assert a == rec.sample_params(0, 3, 17, 500, 375)
    # a different seed, epoch or index draws differently (over a handful of indices)
    others = [
        rec.sample_params(1, 3, 17, 500, 375),
        rec.sample_params(0, 4, 17, 500, 375),
        rec.sample_params(0, 3, 18, 500, 375),
    ]
    assert all(o != a for o in others)


def test_random_resized_crop_box_inside_image_and_within_scale_ratio():
    st = R.RandomResizedCrop(224, scale=(0.2, 0.9), ratio=(0.5, 2.0))
    rec = R.Recipe([R.Decode(), st])
    for i in range(300):
        p = rec.sample_params(0, 0, i, 400, 300)
        assert isinstance(p.ops[0], Crop)
        x, y, w, h = p.ops[0].x, p.ops[0].y, p.ops[0].w, p.ops[0].h
        assert 0 <= x and 0 <= y and x + w <= 400 and y + h <= 300
        assert p.ops[1] == Resize(224, 224)
        if not (w == 400 or h == 300):  # not the fallback
            assert 0.2 * 0.98 <= (w * h) / (400 * 300) <= 0.9 * 1.02
            assert 0.5 * 0.9 <= w / h <= 2.0 * 1.1


def test_flip_probability_is_respected():
    rec = R.Recipe([R.Decode(), R.CenterCrop(8), R.HorizontalFlip(0.3)])
    flips = sum(Flip() in rec.sample_params(0, 0, i, 16, 16).ops for i in range(2000))
    assert 0.25 * 2000 < flips < 0.35 * 2000
    never = R.Recipe([R.Decode(), R.CenterCrop(8), R.HorizontalFlip(0.0)])
    assert not any(Flip() in never.sample_params(0, 0, i, 16, 16).ops for i in range(200))


def test_eval_recipe_matches_torchvision_resize_then_center_crop_geometry():
    rec = R.imagenet_eval(224)
    p = rec.sample_params(0, 0, 0, 500, 375)
    # Resize(256): short side 375 -> 256, long side int(256 * 500 / 375) = 341
    assert p.ops[0] == Resize(256, 341)
    # CenterCrop(224): top round((256-224)/2)=16, left round((341-224)/2)=58 (58.5 rounds to even)
    assert p.ops[1] == Crop(58, 16, 224, 224)
    assert p.out_hw == (224, 224)


def test_output_dtype_and_layout():
    assert R.imagenet_train(224).dtype == "uint8"
    assert R.imagenet_train(224, normalize=True).dtype == "float32"
    rec = R.Recipe([R.Decode(), R.CenterCrop((32, 48)), R.ToTensor(layout="HWC", dtype="float16")])
    assert rec.output_shape(4) == (4, 32, 48, 3) and rec.dtype == "float16"


@pytest.mark.parametrize(
    "build,msg",
    [
        (lambda: R.RandomResizedCrop(0), "RandomResizedCrop: size"),
        (lambda: R.RandomResizedCrop(224, scale=(0.5, 0.1)), "scale"),
        (lambda: R.RandomResizedCrop(224, ratio=(-1, 2)), "ratio"),
        (lambda: R.Resize("big"), "Resize: size"),
        (lambda: R.CenterCrop((0, 3)), "CenterCrop: size"),
        (lambda: R.HorizontalFlip(1.5), "HorizontalFlip: p"),
        (lambda: R.Normalize(mean=(1, 2)), "Normalize: mean"),
        (lambda: R.Normalize(std=(1, 0, 1)), "Normalize: std"),
        (lambda: R.Normalize(std=(0.2, float("nan"), 0.2)), "Normalize: std must be finite"),  # every image NaN before
        (lambda: R.Normalize(mean=(float("nan"), 0.4, 0.4)), "Normalize: mean must be finite"),
        (lambda: R.Normalize(std=(float("inf"), 1, 1)), "Normalize: std must be finite"),
        (lambda: R.ToTensor(layout="NCHW"), "ToTensor: layout"),
        (lambda: R.Recipe([R.RandomResizedCrop(8)]), "first stage must be Decode"),
        (lambda: R.Recipe([R.Decode(), R.Normalize(), R.CenterCrop(8)]), "out of order"),
        (lambda: R.Recipe([R.Decode(), R.Resize(8)]), "not fixed"),
        (lambda: R.Recipe([R.Decode(), "flip"]), "not a hybridload.recipe stage"),
    ],
)
def test_bad_stage_arguments_say_what_to_change(build, msg):
    with pytest.raises(ValueError, match=msg):
        build()


def test_normalize_takes_tensors_and_arrays_as_torchvision_does():
    import numpy as np
    import torch

    stage = R.Normalize(torch.tensor([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225], dtype=np.float32))
    assert stage.mean == pytest.approx((0.485, 0.456, 0.406)) and stage.std == pytest.approx((0.229, 0.224, 0.225))
    assert all(type(x) is float for x in stage.mean + stage.std)
    with pytest.raises(ValueError, match="Normalize: mean must be three numbers"):
        R.Normalize(torch.tensor([0.5, 0.5]))


def test_normalize_in_0_255_units_warns_once_naming_the_values_to_write():
    def build():
        return R.Normalize(mean=(123.7, 116.3, 103.5), std=(58.4, 57.1, 57.4))  # DALI's units

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")  # Python's own: once per place that builds it
        for _ in range(3):
            build()
        R.Normalize()  # [0, 1] units: no warning
    assert len(seen) == 1 and seen[0].filename == __file__, [str(w.message) for w in seen]
    assert "[0, 1] units" in str(seen[0].message)
    assert "Normalize(mean=(0.4851, 0.4561, 0.4059), std=(0.229, 0.2239, 0.2251))" in str(seen[0].message)


def test_unknown_stage_argument_names_the_stage():
    with pytest.raises(TypeError, match="RandomResizedCrop"):
        R.RandomResizedCrop(224, sclae=(0.1, 1.0))


def test_every_stage_class_has_a_phase_and_the_phases_run_decode_geometry_colour_normalize_erase_layout():
    from hybridload.recipe._order import PER_SAMPLE, Phase, phase_of
    from hybridload.recipe._stages import GEOMETRY

    assert phase_of(R.Decode) is Phase.DECODE
    assert all(phase_of(k) is Phase.GEOMETRY for k in GEOMETRY)
    assert all(phase_of(k) is Phase.PHOTOMETRIC for k in PER_SAMPLE if k not in GEOMETRY)
    assert [phase_of(k) for k in (R.Normalize, R.RandomErasing, R.ToTensor)] == [
        Phase.NORMALIZE,
        Phase.ERASE,
        Phase.LAYOUT,
    ]
    assert phase_of(R.CustomStage) is None and phase_of(int) is None
    assert list(Phase) == sorted(Phase)


@pytest.mark.parametrize("seed", [0, 5, 2**32, 2**63 + 5, -1])
def test_a_batchs_generators_draw_what_each_samples_keyed_generator_draws(seed):
    # keys of one word and of two (2**32 and above: numpy's own path), in no order, repeated
    indices = [17, 0, 2**31, 2**32 - 1, 2**32, 3, 17, 2**40 + 1]
    for epoch in (0, 1, 2**33):
        keyed = sample_generators(seed, epoch, np.array(indices))
        for j in [7, 0, 3, 1, 6, 2, 5, 4]:  # re-seeded per call, in any order
            g, ref = keyed.generator(j), R.sample_generator(seed, epoch, indices[j])
            assert g.random(3).tolist() == ref.random(3).tolist()
            assert g.integers(0, 1000, 4).tolist() == ref.integers(0, 1000, 4).tolist()
            assert g.random() == ref.random()  # integers' buffered 32-bit half left behind too


def test_sample_params_with_a_batchs_generator_are_the_samples_own():
    rec = R.Recipe([R.Decode(), R.RandomResizedCrop(96, scale=(0.1, 0.9)), R.HorizontalFlip(0.5)])
    keyed = sample_generators(7, 2, np.arange(40))
    for i in range(40):
        own = rec.sample_params(7, 2, i, 320, 211)
        assert rec.sample_params(7, 2, i, 320, 211, lambda i=i: keyed.generator(i)) == own


def test_random_resized_crop_draws_torchvisions_box_from_numpys_uniform():
    """The box of torchvision's get_params with numpy's ``uniform`` (the stage draws through
    ``random()`` with the same arithmetic: the same boxes, to the bit)."""
    st = R.RandomResizedCrop(224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
    rec = R.Recipe([R.Decode(), st])
    for i in range(400):
        w, h = 300 + i % 250, 500 - i % 170
        rng = R.sample_generator(1, 0, i)
        want = None
        for _ in range(10):
            area = w * h * rng.uniform(*st.scale)
            aspect = math.exp(rng.uniform(math.log(st.ratio[0]), math.log(st.ratio[1])))
            cw, ch = int(round(math.sqrt(area * aspect))), int(round(math.sqrt(area / aspect)))
            if 0 < cw <= w and 0 < ch <= h:
                want = Crop(int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1)), cw, ch)
                break
        if want is not None:
            assert rec.sample_params(1, 0, i, w, h).ops[0] == want
