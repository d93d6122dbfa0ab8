"""The recipe: what is done to each sample, as declarations that every engine compiles.

``_core`` (Recipe, per-sample parameters), ``_order`` (the stages' order rules), ``_stages``
(decode, crops, flip, normalize, layout), ``_photometric`` (colour stages, erasing), ``_autoaug``,
``_custom`` (user CPU stages), ``_presets`` and ``_ops`` (the typed ops engines run); their draws
come from `hybridload._keyed`.
Users reach everything as ``hybridload.recipe.<Name>``.
"""

from hybridload.recipe._autoaug import TrivialAugmentWide
from hybridload.recipe._core import Recipe, SampleParams, imagenet_eval, imagenet_train, make, sample_generator
from hybridload.recipe._custom import CustomStage
from hybridload.recipe._order import PER_SAMPLE
from hybridload.recipe._photometric import ColorJitter, GaussianBlur, RandomErasing, RandomGrayscale
from hybridload.recipe._stages import (
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
