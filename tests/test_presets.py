"""recipe.imagenet_train(size, augment=...): "basic" is the recipe as it always was; "color" and
"trivialaugment" follow timm's and torchvision's training recipes (hybridload.recipe._presets)."""

import pytest

from hybridload import recipe
from hybridload.recipe._presets import COLOR_JITTER, RANDOM_ERASE_P


def names(rec):
    return [type(s).__name__ for s in rec.stages]


@pytest.mark.parametrize("normalize", [False, True])
def test_basic_is_the_recipe_as_it_always_was(normalize):
    old = [recipe.Decode(), recipe.RandomResizedCrop(64), recipe.HorizontalFlip(0.5)] + (
        [recipe.Normalize()] if normalize else []
    )
    assert recipe.imagenet_train(64, normalize=normalize) == recipe.Recipe(old)
    assert recipe.imagenet_train(64, normalize=normalize, augment="basic") == recipe.Recipe(old)


def test_an_unknown_augment_lists_the_choices():
    with pytest.raises(ValueError, match="augment must be one of 'basic', 'color', 'trivialaugment', got 'colour'"):
        recipe.imagenet_train(64, augment="colour")


@pytest.mark.parametrize("normalize", [False, True])
def test_color_adds_timms_color_jitter_after_the_flip(normalize):
    rec = recipe.imagenet_train(64, normalize=normalize, augment="color")
    assert names(rec) == ["Decode", "RandomResizedCrop", "HorizontalFlip", "ColorJitter"] + (
        ["Normalize"] if normalize else []
    )
    assert rec.stages[3] == recipe.ColorJitter(*COLOR_JITTER)


def test_trivialaugment_adds_torchvisions_policy_and_random_erasing_last():
    rec = recipe.imagenet_train(64, normalize=True, augment="trivialaugment")
    assert names(rec) == [
        "Decode",
        "RandomResizedCrop",
        "HorizontalFlip",
        "TrivialAugmentWide",
        "Normalize",
        "RandomErasing",
    ]
    assert rec.stages[-1] == recipe.RandomErasing(p=RANDOM_ERASE_P)


def test_trivialaugment_without_normalize_says_to_normalize():
    with pytest.raises(ValueError, match="normalize=True"):
        recipe.imagenet_train(64, augment="trivialaugment")
