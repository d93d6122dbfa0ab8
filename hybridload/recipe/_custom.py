"""The user's own CPU stage, for what no engine has: ``fn(image, rng) -> image`` over one decoded
image with a generator of its own stream, so it moves no other stage's draws (its rules and an
example: docs/guide/recipes.md, "On the CPU, per image")."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Callable, Protocol, Union

import numpy as np
import torch

from hybridload._keyed import keyed_generator
from hybridload.recipe._ops import Op, Slot

#: the custom stages' streams, one per stage position, apart from `sample_generator`'s
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
