"""The CPU engine: every recipe stage as pure functions over bytes and arrays (its op table:
``geometry.OP_FUNCTIONS``, and `compile`, a recipe into its per-sample function; the DALI and
torch engines sit beside it in ``hybridload/pipelines/`` and ``hybridload/torchops/``).

Run directly by the in-process lane and by Ray actors; testable without either.
Engines (chosen by measurement, see benchmarks/RESULTS.md): libjpeg-turbo through
simplejpeg for JPEG decoding, libjpeg-turbo 3's cropping region (the ``turbojpeg`` wheel,
through ctypes) to decode only a sample's crop where its first op is one (the same pixels),
Pillow for other formats, and torch's antialiased bilinear uint8 resize.

Modules: ``batch`` (one sample, end to end; a CPU lane's batch job is
``hybridload/lanes/cpu_job.py``), ``decode`` (bytes to an RGB image),
``jpeg_markers`` (the walk over a JPEG header's marker segments), ``jpeg_check`` (the
structure check every lane runs before decoding a JPEG), ``turbo`` (TurboJPEG 3's
cropping region through ctypes), ``crop_window`` (decoding only a sample's crop), ``dct_scale``
(decoding at 1/2, 1/4 or 1/8 where the recipe shrinks that much), ``geometry`` (crops, resizes,
flips), ``photometric`` (the colour ops' reference formulas), ``grey`` (grey levels and exact
channel sums), ``erase`` (RandomErasing on a delivered batch) and ``scratch`` (per-thread
temporaries).
"""

from hybridload.batch_result import BatchResult
from hybridload.kernels.batch import process_sample, start_reads
from hybridload.kernels.decode import MAX_IMAGE_PIXELS, DecodeError, check_pixels, decode_image, image_size
from hybridload.kernels.geometry import OP_FUNCTIONS, UNSUPPORTED, apply_ops, compile

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
