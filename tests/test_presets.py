"""recipe.imagenet_train(size, augment=...): "basic" is the recipe as it always was; "color" and
"trivialaugment" follow timm's and torchvision's training recipes (hybridload.presets)."""

import pytest

from hybridload import recipe
from hybridload.presets import COLOR_JITTER, RANDOM_ERASE_P

PHOTOMETRIC = ("ColorJitter", "TrivialAugmentWide", "RandomErasing")
needs_photometric = pytest.mark.skipif(
    not all(hasattr(recipe, n) for n in PHOTOMETRIC),
    reason="recipe.ColorJitter / TrivialAugmentWide / RandomErasing come from branch s2-14a (issue 14); "
           "these run once both branches are merged")


def names(rec):
    return [type(s).__name__ for s in rec.stages]


@pytest.mark.parametrize("normalize", [False, True])
def test_basic_is_the_recipe_as_it_always_was(normalize):
    old = [recipe.Decode(), recipe.RandomResizedCrop(64), recipe.HorizontalFlip(0.5)] + (
        [recipe.Normalize()] if normalize else [])
    assert recipe.imagenet_train(64, normalize=normalize) == recipe.Recipe(old)
    assert recipe.imagenet_train(64, normalize=normalize, augment="basic") == recipe.Recipe(old)


def test_an_unknown_augment_lists_the_choices():
    with pytest.raises(ValueError, match="augment must be one of 'basic', 'color', 'trivialaugment', got 'colour'"):
        recipe.imagenet_train(64, augment="colour")


@needs_photometric
@pytest.mark.parametrize("normalize", [False, True])
def test_color_adds_timms_color_jitter_after_the_flip(normalize):
    rec = recipe.imagenet_train(64, normalize=normalize, augment="color")
    assert names(rec) == ["Decode", "RandomResizedCrop", "HorizontalFlip", "ColorJitter"] + (
        ["Normalize"] if normalize else [])
    assert rec.stages[3] == recipe.ColorJitter(*COLOR_JITTER)


@needs_photometric
@pytest.mark.parametrize("normalize", [False, True])
def test_trivialaugment_adds_torchvisions_policy_and_random_erasing_last(normalize):
    rec = recipe.imagenet_train(64, normalize=normalize, augment="trivialaugment")
    assert names(rec) == ["Decode", "RandomResizedCrop", "HorizontalFlip", "TrivialAugmentWide"] + (
        ["Normalize"] if normalize else []) + ["RandomErasing"]
    assert rec.stages[-1] == recipe.RandomErasing(p=RANDOM_ERASE_P)


@pytest.mark.skipif(all(hasattr(recipe, n) for n in PHOTOMETRIC), reason="the photometric stages exist here")
def test_without_the_photometric_stages_a_preset_says_what_it_needs():
    with pytest.raises(NotImplementedError, match="needs recipe.ColorJitter.*use augment='basic'"):
        recipe.imagenet_train(64, augment="color")
