"""The torch engine: the recipe's ops as torch functions on CHW uint8 tensors, on any device, for
the torch GPU lane. Modules: ``ops`` (the table, `compile`, geometry) and ``photo`` (colour).
"""

from hybridload._torchops.ops import OP_FUNCTIONS, UNSUPPORTED, apply_ops, apply_ops_batch, as_op, compile, stack

__all__ = ["OP_FUNCTIONS", "UNSUPPORTED", "apply_ops", "apply_ops_batch", "as_op", "compile", "stack"]
