"""The CPU engine: every recipe stage as pure functions over bytes and arrays, so the lanes and
Ray actors run it alike and tests run it without either (its engines, chosen by measurement:
docs/guide/recipes.md and benchmarks/RESULTS.md).

Modules: ``batch`` (one sample, end to end), ``decode`` (bytes to an RGB image),
``jpeg_markers`` (a JPEG header's marker segments), ``jpeg_check`` (the structure check before
any JPEG decode), ``turbo`` (TurboJPEG 3 through ctypes), ``crop_window`` (decoding only a
sample's crop), ``dct_scale`` (decoding at 1/2, 1/4 or 1/8), ``pixel_limit`` (the pixel limit
every decode keeps), ``geometry`` (the op table, crops, resizes, flips, `compile`),
``photometric`` (the colour ops' reference formulas), ``grey`` (grey levels, exact channel
sums), ``erase`` (RandomErasing) and ``scratch`` (per-thread temporaries).
"""

from hybridload._batch_result import BatchResult
from hybridload._kernels.batch import process_sample, start_reads
from hybridload._kernels.decode import MAX_IMAGE_PIXELS, DecodeError, check_pixels, decode_image, image_size
from hybridload._kernels.geometry import OP_FUNCTIONS, UNSUPPORTED, apply_ops, compile

__all__ = [
    "BatchResult",
    "process_sample",
    "start_reads",
    "decode_image",
    "image_size",
    "check_pixels",
    "DecodeError",
    "apply_ops",
    "compile",
    "OP_FUNCTIONS",
    "UNSUPPORTED",
    "MAX_IMAGE_PIXELS",
]
