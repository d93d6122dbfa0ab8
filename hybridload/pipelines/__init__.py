"""The DALI engine: the recipe as a DALI graph.

Its op table is ``ops.OP_FUNCTIONS``. `chain_for` / `chain_params` (``params``) map a recipe and its
per-sample parameters onto the fixed chain a DALI graph runs; `build_pipeline` (``builder``) builds
that graph, with the colour stages' inputs from ``photo``. DALI is
imported only inside `build_pipeline`, so ``import hybridload`` works without it.
"""

from hybridload.pipelines.builder import INPUTS, build_photo_pipeline, build_pipeline, used_inputs
from hybridload.pipelines.params import Chain, ChainParams, chain_for, chain_params

__all__ = [
    "INPUTS",
    "build_pipeline",
    "build_photo_pipeline",
    "used_inputs",
    "Chain",
    "ChainParams",
    "chain_for",
    "chain_params",
]


def dali_available() -> bool:
    """True when DALI can be imported here."""
    try:
        import nvidia.dali  # noqa: F401
    except Exception:
        return False
    return True
