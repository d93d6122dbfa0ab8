"""The torch engine: the recipe's ops as torch functions on CHW uint8 tensors, on any device,
for the torch GPU lane (``hybridload/lanes/gpu/torch_lane.py``).

Side by side with the CPU engine (``hybridload/kernels/``) and the DALI engine
(``hybridload/pipelines/``): ``ops`` holds its table (`OP_FUNCTIONS`, `UNSUPPORTED`), `compile`
(a recipe into its batch function) and the geometric ops, ``photo`` the colour ops.
"""

from hybridload.torchops.ops import OP_FUNCTIONS, UNSUPPORTED, apply_ops, apply_ops_batch, as_op, compile, stack

__all__ = ["OP_FUNCTIONS", "UNSUPPORTED", "apply_ops", "apply_ops_batch", "as_op", "compile", "stack"]
