"""The recipe: stages compiled per sample into `SampleParams` from (seed, epoch, index) and the
image's size alone, so every lane cuts the same boxes (docs/guide/recipes.md; adding a stage:
CONTRIBUTING.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from hybridload.recipe._custom import CustomStage, SampleOp
from hybridload._keyed import KeyedGenerators, keyed_generator
from hybridload.recipe._ops import Slot
from hybridload.recipe._order import NOT_FIXED, PER_SAMPLE, check_order, fixed_hw
from hybridload.recipe._stages import (
    CenterCrop,
    Decode,
    Normalize,
    Resize,
    Stage,
    ToTensor,
)
from hybridload.recipe._photometric import RandomErasing

__all__ = ["Recipe", "SampleParams", "sample_generator", "sample_generators", "imagenet_train", "imagenet_eval", "make"]

# ---------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class SampleParams:
    """Concrete operations for one sample, applied in order after decoding.

    Attributes:
        ops: the `hybridload.recipe._ops` objects, in order (a crop's parts outside the image read as zeros).
        stages: the recipe stage each op came from, one name per op.
        out_hw: the (height, width) of the result.
    """

    ops: tuple[SampleOp, ...]
    stages: tuple[str, ...]
    out_hw: tuple[int, int]


def sample_generator(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator of one sample: keyed by (seed, epoch, index) and nothing else.

    Args:
        seed: the loader's seed.
        epoch: the epoch (non-negative).
        index: the sample's index in the dataset.

    Returns:
        A numpy generator whose draws are the same in every lane, worker and process.
    """
    return keyed_generator(seed, epoch, index)


def sample_generators(seed: int, epoch: int, indices) -> KeyedGenerators:
    """The `sample_generator` of every sample of a batch, keyed at once.

    Args:
        seed: the loader's seed.
        epoch: the epoch (non-negative).
        indices: the samples' indices in the dataset, in batch order.

    Returns:
        A `KeyedGenerators` whose ``generator(j)`` draws what ``sample_generator(seed, epoch,
        indices[j])`` draws (one bit generator re-seeded: one thread's, valid until the next call).
    """
    return KeyedGenerators(seed, (epoch,), indices)


# --------------------------------------------------------------------------- recipe


@dataclass(frozen=True)
class Recipe:
    """An ordered, validated list of stages.

    Decode, geometric, photometric, Normalize?, RandomErasing?, ToTensor?, with a fixed output
    size so samples stack (the rules: `hybridload.recipe._order`, docs/guide/recipes.md).

    Attributes:
        stages: the stages, in the order they run.
    """

    stages: tuple[Stage, ...] = field(default_factory=tuple)

    def __post_init__(self):
        stages = tuple(self.stages)
        object.__setattr__(self, "stages", stages)
        check_order(stages)

    # -- static facts
    @property
    def out_hw(self) -> tuple[int, int]:
        """(height, width) of every output image (a recipe without one is refused when made)."""
        hw = fixed_hw(self.stages)
        if hw is None:
            raise ValueError(NOT_FIXED)
        return hw

    @property
    def gpu_capable(self) -> bool:
        """False when a stage runs on the CPU kernels only (a CustomStage): CPU lanes only."""
        return all(getattr(s, "gpu_capable", True) for s in self.stages)

    @property
    def normalize(self) -> Normalize | None:
        return next((s for s in self.stages if isinstance(s, Normalize)), None)

    @property
    def erasing(self) -> RandomErasing | None:
        return next((s for s in self.stages if isinstance(s, RandomErasing)), None)

    @property
    def layout(self) -> str:
        tt = next((s for s in self.stages if isinstance(s, ToTensor)), None)
        return tt.layout if tt else "CHW"

    @property
    def dtype(self) -> str:
        tt = next((s for s in self.stages if isinstance(s, ToTensor)), None)
        if tt and tt.dtype:
            return tt.dtype
        return "float32" if self.normalize else "uint8"

    def output_shape(self, batch_size: int) -> tuple[int, ...]:
        h, w = self.out_hw
        return (batch_size, 3, h, w) if self.layout == "CHW" else (batch_size, h, w, 3)

    # -- per-sample parameters
    def sample_params(
        self,
        seed: int,
        epoch: int,
        index: int,
        width: int,
        height: int,
        generator: Callable[[], np.random.Generator] | None = None,
    ) -> SampleParams:
        """Concrete operations for sample ``index`` of an image of ``width`` x ``height``.

        Args:
            seed: the loader's seed.
            epoch: the epoch.
            index: the sample's index in the dataset.
            width: the decoded image's width (from the file's header).
            height: its height.
            generator: gives this sample's `sample_generator` when a stage first draws (a
                batch's `sample_generators`); None: made here.
        """
        gen: list[np.random.Generator] = []

        def rng() -> np.random.Generator:  # made on first use: most eval recipes draw nothing
            if not gen:
                gen.append(sample_generator(seed, epoch, index) if generator is None else generator())
            return gen[0]

        ops: list[SampleOp] = []
        names: list[str] = []
        hw = (int(height), int(width))
        for k, st in enumerate(self.stages):
            if isinstance(st, PER_SAMPLE):
                new, hw = st.sample_ops(hw, rng)
                ops += new
                names += [type(st).__name__] * len(new)
            elif isinstance(st, CustomStage):  # its own generator, keyed by (seed, epoch, index, k)
                ops.append(st.op(seed, epoch, index, k))
                names.append(repr(st))
        return SampleParams(tuple(ops), tuple(names), hw)

    def op_slots(self) -> tuple[tuple[object, tuple[Slot, ...]], ...]:
        """Each stage that emits per-sample ops, with the `Slot`s it fills, in order: what an
        engine compiles its pipeline from."""
        return tuple((st, st.op_slots()) for st in self.stages if isinstance(st, (*PER_SAMPLE, CustomStage)))

    def cannot_run(self, engine: str, functions: Mapping[type, object], unsupported: Mapping[type, str]) -> str | None:
        """Pure: why ``engine``, whose op table is ``functions`` (its reasons: ``unsupported``),
        cannot run this recipe (the first op type a stage emits that it has no function for),
        or None. Each engine's ``compile`` asks it."""
        for st, slots in self.op_slots():
            for op in (t for slot in slots for t in slot.types if t not in functions):
                why = unsupported.get(op, f"no function for it in the {engine} engine's OP_FUNCTIONS")
                return f"the {engine} engine cannot run {op.__name__} of {st!r}: {why}"
        return None

    def describe(self) -> str:
        return " -> ".join(repr(s) for s in self.stages)


def imagenet_train(size: int = 224, normalize: bool = False, augment: str = "basic") -> Recipe:
    """Decode, RandomResizedCrop(size), HorizontalFlip(0.5)[, Normalize] — uint8 CHW by default.

    Args:
        size: the output side in pixels.
        normalize: add ``Normalize`` with ImageNet's mean and std (float32 output).
        augment: "basic" (just that), "color" (+ ColorJitter, timm's default) or
            "trivialaugment" (+ TrivialAugmentWide and RandomErasing, torchvision's recipe); the
            exact stages: the recipes page, "Presets".
    """
    from hybridload.recipe._presets import train_stages  # presets builds on this module's stages

    return Recipe(tuple(train_stages(size, normalize=normalize, augment=augment)))


def imagenet_eval(size: int = 224, resize: int | None = None, normalize: bool = False) -> Recipe:
    """Decode, Resize(size * 256 / 224), CenterCrop(size)[, Normalize].

    Args:
        size: the output side in pixels.
        resize: the shorter side before the centre crop; None: ``size * 256 / 224``.
        normalize: add ``Normalize`` with ImageNet's mean and std (float32 output).
    """
    stages: list[Stage] = [Decode(), Resize(resize or int(round(size * 256 / 224))), CenterCrop(size)]
    if normalize:
        stages.append(Normalize())
    return Recipe(tuple(stages))


def make(stages: Sequence[Stage]) -> Recipe:
    """Build a Recipe from any sequence of stages.

    Args:
        stages: the stages in order (checked as `Recipe` checks them).
    """
    return Recipe(tuple(stages))
