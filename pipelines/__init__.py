"""DALI pipeline builders (installed as ``hybridload.pipelines``).

The GPU lane compiles a recipe into a DALI pipeline here. This package never imports
DALI at import time, so ``import hybridload`` works where DALI is not installed.
"""
