"""Delivery: a merged batch on its way to the training step.

``transfer`` (the target device, pinned host buffers, side-stream copies), ``finish`` (Normalize
and RandomErasing on the delivered batch) and ``batch_hook`` (the user's ``batch_transform``
with its keyed generator).
"""

from hybridload.delivery.finish import finish_batch
from hybridload.delivery.transfer import DeviceMover, default_device, resolve_device

__all__ = ["DeviceMover", "default_device", "finish_batch", "resolve_device"]
