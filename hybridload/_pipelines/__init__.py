"""The DALI engine: the recipe as a DALI graph, DALI imported only inside `build_pipeline` so
``import hybridload`` works without it.

Modules: ``ops`` (the op table, `OP_FUNCTIONS`, and `VALUES`), ``plan`` (`compile`: op slots into
the fixed graph's plan), ``params`` (`chain_params`: each sample's inputs to it), ``builder``
(`build_pipeline`) and ``photo`` (the colour stages' graph).
"""

from hybridload._pipelines.builder import INPUTS, build_photo_pipeline, build_pipeline, used_inputs
from hybridload._pipelines.ops import OP_FUNCTIONS, UNSUPPORTED
from hybridload._pipelines.params import ChainParams, chain_for, chain_params
from hybridload._pipelines.plan import Chain, DaliPlan, compile, photo_vectors

__all__ = [
    "INPUTS",
    "OP_FUNCTIONS",
    "UNSUPPORTED",
    "build_pipeline",
    "build_photo_pipeline",
    "used_inputs",
    "Chain",
    "ChainParams",
    "DaliPlan",
    "chain_for",
    "chain_params",
    "compile",
    "photo_vectors",
]


def dali_available() -> bool:
    """True when DALI can be imported here."""
    try:
        import nvidia.dali  # noqa: F401
    except Exception:
        return False
    return True
