"""The user's own CPU stage: a function over one decoded image and a keyed generator.

For what no engine has, a recipe may hold `CustomStage`::

    def posterize(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        bits = int(rng.integers(4, 8))
        return image & np.uint8((0xFF << (8 - bits)) & 0xFF)

    rec = recipe.Recipe([recipe.Decode(), recipe.RandomResizedCrop(224),
                         recipe.CustomStage(posterize), recipe.HorizontalFlip()])

The protocol (`CustomFn`): ``fn(image, rng) -> image`` where ``image`` is the
current HWC uint8 numpy array (3 channels; it may be modified in place) and ``rng`` a
``numpy.random.Generator`` keyed by (seed, epoch, index) and the stage's position in the
recipe, so its draws are the same in every lane, worker and rerun, and independent of the
other stages' draws (adding a custom stage does not change any other stage's boxes). It
returns an HWC uint8 array of the same shape: custom stages change pixels, the recipe's
stages change geometry.

Rules:

* a recipe holding one runs on CPU lanes only (``Recipe.gpu_capable`` is False; the GPU lane
  is disabled with one warning by `hybridload.policy.decode.decode_lanes`);
* the function travels with the recipe to worker processes (pickle) and Ray actors
  (cloudpickle): define it at module level; `check_shippable` says so, naming it, when
  the loader is built.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Callable, Protocol, Union

import numpy as np
import torch

from hybridload.keyed import keyed_generator
from hybridload.recipe.ops import Op, Slot

#: Spawn key of the custom stages' generators: apart from the shared per-sample generator
#: (``recipe.sample_generator``, spawn key ()), one stream per stage position.
_SPAWN_TAG = 0x637573746F6D  # "custom"


class CustomFn(Protocol):
    """``fn(image, rng) -> image``: HWC uint8 in, HWC uint8 of the same shape out."""

    def __call__(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray: ...


def fn_name(fn: Callable) -> str:
    """The function's name as the user wrote it (``module.qualname``)."""
    module = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", None) or getattr(type(fn), "__qualname__", repr(fn))
    return f"{module}.{qual}" if module else str(qual)


@dataclass(frozen=True)
class CustomStage:
    """A user's function over one decoded image, run by the CPU kernels only.

    Attributes:
        fn: ``fn(image, rng) -> image`` (see `CustomFn`); define it at module level.
        name: a label for errors and ``describe()``; default: the function's name.
    """

    fn: Callable
    name: str | None = None
    #: the GPU engines have no step for a user's function: a recipe holding one runs on CPU lanes
    gpu_capable = False

    def __post_init__(self):
        if not callable(self.fn):
            raise TypeError(
                f"CustomStage: fn must be a function fn(image, rng) -> image, got {self.fn!r} "
                f"({type(self.fn).__name__})"
            )
        if self.name is not None and not isinstance(self.name, str):
            raise TypeError(f"CustomStage: name must be a str or None, got {self.name!r}")
        if self.name is None:
            object.__setattr__(self, "name", getattr(self.fn, "__name__", None) or type(self.fn).__name__)

    def __repr__(self) -> str:
        return f"CustomStage({self.name})"

    def op(self, seed: int, epoch: int, index: int, position: int) -> "CustomOp":
        """This stage's op for one sample (its generator's key travels with it)."""
        return CustomOp(self, (int(seed), int(epoch), int(index), int(position)))

    def op_slots(self) -> tuple[Slot, ...]:
        return (Slot((CustomOp,)),)


@dataclass(frozen=True)
class CustomOp:
    """The op of a `CustomStage` for one sample: the stage and the generator's key
    ``(seed, epoch, index, stage position)``."""

    stage: CustomStage
    key: tuple[int, int, int, int]


#: what a sample's op list holds: the typed ops every engine runs, and the CPU-only custom ones
SampleOp = Union[Op, CustomOp]


def custom_generator(seed: int, epoch: int, index: int, position: int) -> np.random.Generator:
    """The generator of the custom stage at ``position`` for sample ``index``: keyed by
    (seed, epoch, index) like every draw, on its own stream per stage position."""
    return keyed_generator(seed, epoch, index, spawn_key=(_SPAWN_TAG, int(position)))


def apply_custom(img: torch.Tensor, op: CustomOp) -> torch.Tensor:
    """Run the user's function on an HWC uint8 tensor (the CPU kernels' function of CustomOp)."""
    stage = op.stage
    arr = np.ascontiguousarray(img.numpy())
    out = stage.fn(arr, custom_generator(*op.key))
    if not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.shape != arr.shape:
        got = f"{out.dtype} array of shape {out.shape}" if isinstance(out, np.ndarray) else f"{type(out).__name__}"
        raise ValueError(
            f"CustomStage {fn_name(stage.fn)} returned {got}; return an HWC uint8 numpy array of the "
            f"input's shape {arr.shape} (e.g. np.clip(x, 0, 255).astype(np.uint8))"
        )
    out = np.ascontiguousarray(out)
    return torch.from_numpy(out if out.flags.writeable else out.copy())  # torch wants writable memory


def custom_stages(stages) -> list[CustomStage]:
    """The custom stages among ``stages``."""
    return [s for s in stages if isinstance(s, CustomStage)]


def check_shippable(stages, ships: tuple[str, str] | None) -> None:
    """Refuse a custom stage whose function cannot travel to the CPU lane's workers.

    ``ships``: ``LaneSpec.ships_recipe`` — (serializer, where): ("pickle", "worker
    processes") or ("cloudpickle", "Ray actors"); None: the work stays in this process.
    """
    if ships is None:
        return
    serializer, where = ships
    dumps = pickle.dumps if serializer == "pickle" else _cloudpickle_dumps()
    for st in custom_stages(stages):
        try:
            dumps(st.fn)
        except Exception as exc:
            raise ValueError(
                f"CustomStage: the function {fn_name(st.fn)} cannot be sent to {where} ({type(exc).__name__}: "
                f"{str(exc)[:200]}); define it at module level (def {getattr(st.fn, '__name__', 'fn')}(image, rng): "
                "... in an importable module, not a lambda, a nested function or a closure over unpicklable "
                "state), or use LoaderPolicy(cpu_actors=0, local_workers='threads') to run it in this process"
            ) from None


def _cloudpickle_dumps() -> Callable:
    try:
        from ray import cloudpickle
    except ImportError:  # Ray missing: the lane will say so when it is built
        return lambda obj: None
    return cloudpickle.dumps
