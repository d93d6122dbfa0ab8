"""Delivery: a merged batch on its way to the training step.

``_transfer`` (the target device, pinned host buffers, side-stream copies), ``_finish`` (Normalize
and RandomErasing on the delivered batch) and ``_batch_hook`` (the user's ``batch_transform``
with its keyed generator).
"""

from hybridload.delivery._finish import finish_batch
from hybridload.delivery._transfer import DeviceMover, default_device, resolve_device

__all__ = ["DeviceMover", "default_device", "finish_batch", "resolve_device"]
