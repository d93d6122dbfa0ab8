"""The stages of ``recipe.imagenet_train(size, augment=...)``, each preset as its source
writes it (the table and the sources: docs/guide/recipes.md, "Presets")."""

from __future__ import annotations

from hybridload.recipe._autoaug import TrivialAugmentWide
from hybridload.recipe._photometric import ColorJitter, RandomErasing
from hybridload.recipe._stages import Decode, HorizontalFlip, Normalize, RandomResizedCrop

AUGMENTS = ("basic", "color", "trivialaugment")

#: timm's default ``color_jitter=0.4`` (brightness, contrast, saturation; hue 0).
COLOR_JITTER = (0.4, 0.4, 0.4, 0.0)
#: torchvision's ``--random-erase 0.1`` (ResNet-50 IMAGENET1K_V2 recipe).
RANDOM_ERASE_P = 0.1


def augment_stages(augment: str) -> tuple[list, list]:
    """The stages ``augment`` adds: (after the flip, after Normalize)."""
    if augment not in AUGMENTS:
        raise ValueError(
            f"imagenet_train: augment must be one of {', '.join(repr(a) for a in AUGMENTS)}, got {augment!r}"
        )
    if augment == "color":
        return [ColorJitter(*COLOR_JITTER)], []
    if augment == "trivialaugment":
        return [TrivialAugmentWide()], [RandomErasing(p=RANDOM_ERASE_P)]
    return [], []


def train_stages(
    size, *, normalize: bool = False, augment: str = "basic", scale: tuple[float, float] = (0.08, 1.0)
) -> list:
    """The stages of ``imagenet_train(size, normalize, augment)`` (``scale``: RandomResizedCrop's)."""
    middle, last = augment_stages(augment)
    if last and not normalize:
        raise ValueError(
            f"imagenet_train(augment={augment!r}) ends with RandomErasing, which works on the "
            "normalized image; write imagenet_train(size, normalize=True, augment=...)"
        )
    out = [Decode(), RandomResizedCrop(size, scale=scale), HorizontalFlip(0.5), *middle]
    if normalize:
        out.append(Normalize())
    return out + last
