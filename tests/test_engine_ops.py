"""Every engine has a function for every op type a recipe can emit, or says why not: the CPU
kernels (``kernels/geometry.py``), the DALI graph (``pipelines/ops.py``) and the torch engine
(``torchops/ops.py``) each keep one table, ``OP_FUNCTIONS`` (op type -> function) and
``UNSUPPORTED`` (op type -> reason). A new op type without its function in an engine fails
here, one case per engine and op type."""

from __future__ import annotations

import importlib
import inspect
import typing

import pytest

from hybridload.recipe import ops
from hybridload.recipe.custom import CustomOp

#: The engines, by the module that holds each one's table.
ENGINES = {"cpu": "hybridload.kernels.geometry", "dali": "hybridload.pipelines.ops", "torch": "hybridload.torchops.ops"}


def op_types() -> list[type]:
    """Every op type a recipe emits: the classes of ``recipe/ops.py`` and the user's `CustomOp`."""
    found = [c for _, c in inspect.getmembers(ops, inspect.isclass) if c.__module__ == ops.__name__]
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
    from hybridload.pipelines import chain_params
    from hybridload.recipe.custom import CustomStage

    params = R.SampleParams(ops=(CustomOp(CustomStage(_same), (0, 0, 0, 1)),), stages=("mine",), out_hw=(8, 8))
    with pytest.raises(ValueError, match="CPU lanes only"):
        chain_params(params, 8, 8)
