"""Every engine has a function for every op type a recipe can emit, or says why not: the CPU
kernels (``hybridload/_kernels/geometry.py``), the DALI graph (``hybridload/_pipelines/ops.py``)
and the torch engine (``hybridload/_torchops/ops.py``) each keep one table, ``OP_FUNCTIONS`` (op
type -> function) and ``UNSUPPORTED`` (op type -> reason). A new op type without its function in
an engine fails here, one case per engine and op type; and each engine's ``compile`` builds every
per-sample stage of the recipe from the op types it declares (``op_slots()``), so a stage whose
ops exist but that an engine cannot wire fails here too, not at run time."""

from __future__ import annotations

import importlib
import inspect
import typing
import warnings
from dataclasses import dataclass

import numpy as np
import pytest

from hybridload import recipe as R
from hybridload.recipe import _ops as ops
from hybridload.recipe._custom import CustomOp

#: The engines, by the module that holds each one's table.
ENGINES = {
    "cpu": "hybridload._kernels.geometry",
    "dali": "hybridload._pipelines.ops",
    "torch": "hybridload._torchops.ops",
}
#: Each engine's package, whose ``compile(recipe)`` builds its pipeline from the recipe's ops.
PACKAGES = {"cpu": "hybridload._kernels", "dali": "hybridload._pipelines", "torch": "hybridload._torchops"}


def op_types() -> list[type]:
    """Every op type a recipe emits: the classes of ``recipe/_ops.py`` and the user's `CustomOp`."""
    found = [c for _, c in inspect.getmembers(ops, inspect.isclass) if c.__module__ == ops.__name__]
    found = [c for c in found if c is not ops.Slot]  # a stage's declaration of its ops, not an op
    return sorted(found, key=lambda c: c.__name__) + [CustomOp]


def test_the_op_union_names_every_op_class_of_the_recipe():
    assert set(typing.get_args(ops.Op)) == set(op_types()) - {CustomOp}


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("op", op_types(), ids=lambda c: c.__name__)
def test_each_engine_has_a_function_for_each_op_type_or_says_why_not(engine, op):
    table = importlib.import_module(ENGINES[engine])
    fn, why = table.OP_FUNCTIONS.get(op), table.UNSUPPORTED.get(op)
    assert (fn is None) != (why is None), (
        f"the {engine} engine ({ENGINES[engine]}) has "
        + ("both a function and a reason" if fn else "no function")
        + f" for {op.__name__}: add one to OP_FUNCTIONS, or its reason to UNSUPPORTED"
    )
    assert fn is None or callable(fn)
    assert why is None or len(why) > 20, f"{engine}: say why {op.__name__} is unsupported"


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_no_engine_table_names_an_op_type_the_recipe_does_not_have(engine):
    table = importlib.import_module(ENGINES[engine])
    assert set(table.OP_FUNCTIONS) | set(table.UNSUPPORTED) <= set(op_types())


def _same(image, rng):
    return image


def test_the_dali_chain_names_the_reason_for_an_op_it_cannot_run():
    from hybridload import recipe as R
    from hybridload._pipelines import chain_params
    from hybridload.recipe._custom import CustomStage

    params = R.SampleParams(ops=(CustomOp(CustomStage(_same), (0, 0, 0, 1)),), stages=("mine",), out_hw=(8, 8))
    with pytest.raises(ValueError, match="CPU lanes only"):
        chain_params(params, 8, 8)


def example(cls: type):
    """A stage of class ``cls`` with its defaults, and 9 for each argument it requires (an odd
    size or kernel: valid for every stage that takes one)."""
    required = [p for p in inspect.signature(cls).parameters.values() if p.default is inspect.Parameter.empty]
    return cls(*[9] * len(required))


def recipe_with(stage) -> R.Recipe:
    """The smallest recipe around ``stage`` that the order rules take (a fixed output size) and
    that DALI's chain fits: the stage alone, else after a crop, else before one."""
    for stages in ([R.Decode(), stage], [R.Decode(), R.CenterCrop(16), stage], [R.Decode(), stage, R.CenterCrop(8)]):
        try:
            return R.make(stages)
        except ValueError:
            continue
    raise AssertionError(f"no recipe around {stage!r}: extend recipe_with")


@pytest.mark.parametrize("cls", R.PER_SAMPLE, ids=lambda c: c.__name__)
def test_every_per_sample_stage_declares_the_op_types_it_emits(cls):
    stage = example(cls)
    assert hasattr(stage, "op_slots"), f"{cls.__name__}: say the op types it emits, op_slots() (recipe/_ops.py: Slot)"
    slots = stage.op_slots()
    rec = recipe_with(stage)
    for index in range(60):
        params = rec.sample_params(3, 0, index, 31 + index % 7, 23 + index % 5)
        emitted = [op for op, name in zip(params.ops, params.stages) if name == cls.__name__]
        k = 0
        for slot in slots:
            if k < len(emitted) and type(emitted[k]) in slot.types:
                k += 1
            else:
                assert slot.optional, f"{cls.__name__} left out a slot it declares always filled: {slot}"
        assert k == len(emitted), f"{cls.__name__} emitted {emitted[k:]}, outside its op_slots() {slots}"


@pytest.mark.parametrize("engine", sorted(PACKAGES))
@pytest.mark.parametrize("cls", R.PER_SAMPLE, ids=lambda c: c.__name__)
def test_each_engine_compiles_every_per_sample_stage_from_its_ops(engine, cls):
    rec = recipe_with(example(cls))
    assert rec.gpu_capable or engine == "cpu"
    compiled = importlib.import_module(PACKAGES[engine]).compile(rec)  # a ValueError names the stage and op
    if engine == "dali":
        from hybridload._pipelines import chain_params

        for index in range(20):
            params = rec.sample_params(3, 1, index, 40, 30)
            inputs = chain_params(params, 40, 30, compiled)
            assert [len(v) for v in inputs.photo] == [stage.width() for stage in compiled.photo]


def test_every_dali_colour_function_has_its_per_sample_value():
    from hybridload._pipelines.ops import OP_FUNCTIONS, VALUES

    missing = [t.__name__ for t in OP_FUNCTIONS if t in ops.PHOTOMETRIC and t not in VALUES]
    assert not missing, f"hybridload/_pipelines/ops.py: add to VALUES the graph input of {missing}"


@dataclass(frozen=True)
class RandomSolarize(R.RandomGrayscale):
    """A stage of no engine's knowing that reuses an op every engine has: Solarize at a drawn
    threshold. Its own class name, so only the ops it declares can wire it."""

    def sample_ops(self, hw, rng):
        return (ops.Solarize(float(rng().uniform(64.0, 192.0))),), hw

    def op_slots(self):
        return (ops.Slot((ops.Solarize,)),)


def test_a_new_stage_of_existing_ops_compiles_in_every_engine():
    rec = R.make([R.Decode(), R.CenterCrop(16), RandomSolarize(), R.ColorJitter(0.3)])
    for engine in sorted(PACKAGES):
        importlib.import_module(PACKAGES[engine]).compile(rec)
    from hybridload._pipelines import chain_params, compile

    plan = compile(rec)
    assert [s.stage for s in plan.photo] == [rec.stages[2], rec.stages[3]]
    params = rec.sample_params(0, 0, 5, 20, 20)
    photo = chain_params(params, 20, 20, plan).photo
    assert photo[0].tolist() == [np.float32(params.ops[1].threshold)]


def test_a_new_stage_of_existing_ops_runs_in_dali_as_in_the_kernels():
    pytest.importorskip("nvidia.dali")
    from hybridload._kernels import apply_ops
    from hybridload._pipelines import build_photo_pipeline, compile, photo_vectors

    rec = R.make([R.Decode(), R.CenterCrop(16), RandomSolarize()])
    plan = compile(rec)
    images = [np.random.default_rng(k).integers(0, 256, (16, 16, 3), dtype=np.uint8) for k in range(4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = build_photo_pipeline(rec, batch_size=len(images))
    params = [rec.sample_params(2, 0, k, 16, 16) for k in range(len(images))]
    pipe.feed_input("image", images)
    for j, name in enumerate(plan.photo_inputs()):
        pipe.feed_input(name, [photo_vectors(plan, p.ops)[j] for p in params])
    (out,) = pipe.run()
    for k, (image, p) in enumerate(zip(images, params)):
        assert np.array_equal(np.array(out.at(k)), apply_ops(image, p.ops).numpy()), k  # Solarize: exact
