"""Photometric stages: torchvision's argument meaning, keyed draws, recipe order, and errors that
say what to write instead."""

import pytest

from hybridload.recipe import _ops as O
from hybridload import recipe as R
from hybridload.recipe._autoaug import OP_NAMES
from hybridload._kernels.erase import erase_boxes


def test_color_jitter_reads_numbers_and_pairs_as_torchvision_does():
    cj = R.ColorJitter(brightness=0.4, contrast=(0.5, 1.5), saturation=2.0, hue=0.1)
    assert cj.brightness == (0.6, 1.4) and cj.contrast == (0.5, 1.5)
    assert cj.saturation == (0.0, 3.0)  # max(0, 1 - x)
    assert cj.hue == (-0.1, 0.1)
    assert R.ColorJitter().brightness is None and R.ColorJitter(hue=0).hue is None  # identity: no draw


@pytest.mark.parametrize(
    "stage, words",
    [
        (lambda: R.ColorJitter(hue=0.6), "hue"),
        (lambda: R.ColorJitter(hue=(-0.7, 0.1)), "hue"),
        (lambda: R.ColorJitter(brightness=-0.1), "brightness"),
        (lambda: R.ColorJitter(contrast=(1.5, 0.5)), "contrast"),
        (lambda: R.ColorJitter(saturation="lots"), "saturation"),
        (lambda: R.GaussianBlur(4), "odd"),
        (lambda: R.GaussianBlur(0), "odd"),
        (lambda: R.GaussianBlur((3, 5)), "kernel_size"),
        (lambda: R.GaussianBlur(5, sigma=(2.0, 1.0)), "sigma"),
        (lambda: R.GaussianBlur(5, sigma=0), "sigma"),
        (lambda: R.RandomGrayscale(1.5), "p must be a probability"),
        (lambda: R.RandomErasing(p=-0.1), "p must be a probability"),
        (lambda: R.RandomErasing(scale=(0.5, 0.1)), "scale"),
        (lambda: R.RandomErasing(ratio=(0, 3)), "ratio"),
        (lambda: R.RandomErasing(value="noise"), "'random'"),
        (lambda: R.RandomErasing(p=1, value=float("nan")), "value must be finite"),  # NaN boxes in batches before
        (lambda: R.RandomErasing(value=(0.0, float("inf"), 0.0)), "value must be finite"),
    ],
)
def test_bad_arguments_are_refused_with_what_to_write(stage, words):
    with pytest.raises(ValueError, match=words) as info:
        stage()
    assert "write" in str(info.value) or "must" in str(info.value)


def test_random_erasing_needs_normalize_before_it_and_photometric_stages_follow_geometry():
    with pytest.raises(ValueError, match="put Normalize"):
        R.make([R.Decode(), R.CenterCrop(8), R.RandomErasing()])
    with pytest.raises(ValueError, match="out of order"):
        R.make([R.Decode(), R.ColorJitter(0.1), R.CenterCrop(8)])
    with pytest.raises(ValueError, match="out of order"):
        R.make([R.Decode(), R.CenterCrop(8), R.Normalize(), R.ColorJitter(0.1)])
    rec = R.make(
        [
            R.Decode(),
            R.RandomResizedCrop(8),
            R.ColorJitter(0.1),
            R.GaussianBlur(3),
            R.Normalize(),
            R.RandomErasing(),
            R.ToTensor(),
        ]
    )
    assert rec.erasing == R.RandomErasing()


def test_each_photometric_stage_emits_a_fixed_number_of_ops_and_draws_are_keyed():
    rec = R.make(
        [
            R.Decode(),
            R.CenterCrop(16),
            R.ColorJitter(0.4, 0.4, 0.4, 0.1),
            R.RandomGrayscale(0.5),
            R.GaussianBlur(5),
            R.TrivialAugmentWide(),
        ]
    )
    seen_ta = set()
    for i in range(200):
        p = rec.sample_params(3, 1, i, 40, 30)
        assert p.stages[1:] == ("ColorJitter",) * 4 + ("RandomGrayscale", "GaussianBlur", "TrivialAugmentWide")
        b, c, s, h, g, blur, ta = p.ops[1:]
        assert 0.6 <= b.factor <= 1.4 and 0.6 <= s.factor <= 1.4 and -0.1 <= h.shift <= 0.1
        assert 0.1 <= blur.sigma <= 2.0 and blur.ksize == 5
        seen_ta.add(type(ta))
        assert p == rec.sample_params(3, 1, i, 40, 30)  # a pure function of (seed, epoch, index)
    assert seen_ta == {O.Brightness, O.Saturation, O.Contrast, O.Posterize, O.Solarize, O.AutoContrast}
    assert rec.sample_params(3, 1, 0, 40, 30) != rec.sample_params(3, 2, 0, 40, 30)
    assert len(OP_NAMES) == 7


def test_adding_a_photometric_stage_leaves_the_geometric_draws_unchanged():
    base = R.make([R.Decode(), R.RandomResizedCrop(16), R.HorizontalFlip()])
    more = R.make([R.Decode(), R.RandomResizedCrop(16), R.HorizontalFlip(), R.ColorJitter(0.4)])
    for i in range(50):
        assert (
            more.sample_params(0, 0, i, 64, 48).ops[: len(base.sample_params(0, 0, i, 64, 48).ops)]
            == base.sample_params(0, 0, i, 64, 48).ops
        )


def test_erasing_boxes_follow_torchvision_bounds_and_depend_only_on_seed_epoch_index():
    st = R.RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3))
    boxes = erase_boxes(st, (32, 48), seed=1, epoch=0, indices=range(400))
    assert boxes == erase_boxes(st, (32, 48), seed=1, epoch=0, indices=range(400))
    hits = [b for b in boxes if b is not None]
    assert 0.4 < len(hits) / len(boxes) < 0.6
    for (top, left, h, w), noise in hits:
        assert noise is None and 0 <= top and top + h <= 32 and 0 <= left and left + w <= 48
        assert 0.3 / 1.2 <= h / w <= 3.3 * 1.2 or min(h, w) < 4  # rounding of small boxes
        assert 0.02 * 32 * 48 * 0.7 <= h * w <= 0.33 * 32 * 48 * 1.3
    assert erase_boxes(st, (32, 48), seed=1, epoch=1, indices=range(400)) != boxes
