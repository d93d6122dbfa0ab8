"""The recipe: what is done to each sample, as declarations that every engine compiles.

``core`` (Recipe, per-sample parameters), ``order`` (the stages' order rules), ``stages``
(decode, crops, flip, normalize, layout), ``photometric`` (colour stages, erasing), ``autoaug``,
``custom`` (user CPU stages), ``presets``, ``ops`` (the typed ops engines run) and ``keys``
(keyed randomness).
Users reach everything as ``hybridload.recipe.<Name>``.
"""

from hybridload.recipe.core import (
    Recipe,
    SampleParams,
    sample_generator,
    imagenet_train,
    imagenet_eval,
    make,
    Stage,
    Size,
    Decode,
    RandomResizedCrop,
    Resize,
    CenterCrop,
    HorizontalFlip,
    Normalize,
    ToTensor,
    ColorJitter,
    RandomGrayscale,
    GaussianBlur,
    RandomErasing,
    TrivialAugmentWide,
    CustomStage,
    PER_SAMPLE,
)

__all__ = [
    "Recipe",
    "SampleParams",
    "sample_generator",
    "imagenet_train",
    "imagenet_eval",
    "make",
    "Stage",
    "Size",
    "Decode",
    "RandomResizedCrop",
    "Resize",
    "CenterCrop",
    "HorizontalFlip",
    "Normalize",
    "ToTensor",
    "ColorJitter",
    "RandomGrayscale",
    "GaussianBlur",
    "RandomErasing",
    "TrivialAugmentWide",
    "CustomStage",
    "PER_SAMPLE",
]
