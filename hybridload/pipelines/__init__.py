"""The DALI engine: the recipe as a DALI graph.

Its op table is ``ops.OP_FUNCTIONS`` (with ``ops.VALUES``, each colour op's per-sample value).
`compile` (``plan``) turns a recipe's op slots into the plan of its fixed graph: the chain's
geometric steps and the colour stages; `chain_params` (``params``) maps each sample's ops onto
that plan's inputs; `build_pipeline` (``builder``) builds the graph, its colour stages from
``photo``. DALI is imported only inside `build_pipeline`, so ``import hybridload`` works
without it.
"""

from hybridload.pipelines.builder import INPUTS, build_photo_pipeline, build_pipeline, used_inputs
from hybridload.pipelines.ops import OP_FUNCTIONS, UNSUPPORTED
from hybridload.pipelines.params import ChainParams, chain_for, chain_params
from hybridload.pipelines.plan import Chain, DaliPlan, compile, photo_vectors

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
