"""The recipe: what is done to each sample, as declarations that every engine compiles.

``core`` (Recipe, per-sample parameters), ``order`` (the stages' order rules), ``stages``
(decode, crops, flip, normalize, layout), ``photometric`` (colour stages, erasing), ``autoaug``,
``custom`` (user CPU stages), ``presets`` and ``ops`` (the typed ops engines run); their draws
come from `hybridload.keyed`.
Users reach everything as ``hybridload.recipe.<Name>``.
"""

from hybridload.recipe.autoaug import TrivialAugmentWide
from hybridload.recipe.core import Recipe, SampleParams, imagenet_eval, imagenet_train, make, sample_generator
from hybridload.recipe.custom import CustomStage
from hybridload.recipe.order import PER_SAMPLE
from hybridload.recipe.photometric import ColorJitter, GaussianBlur, RandomErasing, RandomGrayscale
from hybridload.recipe.stages import (
    CenterCrop,
    Decode,
    HorizontalFlip,
    Normalize,
    RandomResizedCrop,
    Resize,
    Size,
    Stage,
    ToTensor,
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
