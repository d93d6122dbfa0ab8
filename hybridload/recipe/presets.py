"""Training presets: the stages of ``recipe.imagenet_train(size, augment=...)``.

=================  =====================================================================
augment            stages (after Decode)
=================  =====================================================================
"basic"            RandomResizedCrop(size), HorizontalFlip(0.5)[, Normalize]
"color"            ... HorizontalFlip(0.5), ColorJitter(0.4, 0.4, 0.4, 0.0)[, Normalize]
"trivialaugment"   ... HorizontalFlip(0.5), TrivialAugmentWide(), Normalize,
                   RandomErasing(p=0.1)
=================  =====================================================================

Sources:

* "color" is timm's default ImageNet training transform (``timm/data/transforms_factory.py``,
  ``transforms_imagenet_train(color_jitter=0.4)``: ``ColorJitter(0.4, 0.4, 0.4)`` — brightness,
  contrast and saturation 0.4, no hue — after the crop and flip, when no auto-augment policy
  is set; its ``grayscale_prob`` defaults to 0, so no RandomGrayscale).
* "trivialaugment" is torchvision's reference recipe for ResNet-50 ``IMAGENET1K_V2``
  (``references/classification``: ``--auto-augment ta_wide --random-erase 0.1``;
  ``presets.ClassificationPresetTrain`` puts TrivialAugmentWide after the flip and
  RandomErasing last, after Normalize). Its batch-level MixUp/CutMix belong in
  ``HybridLoader(..., batch_transform=fn)``.

"basic" keeps one stream from release to release (pinned by tests/test_stream_digests.py).
RandomErasing works on the normalized image (as in torchvision), so "trivialaugment" needs
``normalize=True``.
"""

from __future__ import annotations

from hybridload.recipe.autoaug import TrivialAugmentWide
from hybridload.recipe.photometric import ColorJitter, RandomErasing
from hybridload.recipe.stages import Decode, HorizontalFlip, Normalize, RandomResizedCrop

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
