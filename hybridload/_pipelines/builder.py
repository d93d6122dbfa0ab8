"""Build a recipe's DALI pipeline from its plan, fed through external_source with the parameters
the recipe's generator drew, so DALI cuts the CPU kernels' boxes and differs only by rounding;
its output is uint8, normalized by the lanes' one finishing step. ``device_id=None``: DALI's
CPU-only mode.
"""

from __future__ import annotations

from typing import Any

from hybridload.recipe import Recipe
from hybridload.recipe._ops import Crop, Flip, Resize

from hybridload._pipelines.ops import OP_FUNCTIONS, Dali
from hybridload._pipelines.photo import photo_graph
from hybridload._pipelines.plan import compile


def decoder_options(types) -> dict:
    """Decoder options that match the CPU lane's pixels: RGB, libjpeg-turbo's "fancy" chroma
    upsampling, EXIF orientation ignored (docs/guide/guarantees.md#pixels)."""
    return dict(output_type=types.RGB, jpeg_fancy_upsampling=True, adjust_orientation=False)


INPUTS = ("encoded", "anchor1", "shape1", "size", "anchor2", "shape2", "flip")


def used_inputs(rec: Recipe) -> tuple[str, ...]:
    """The external_source names the pipeline of ``rec`` takes (DALI prunes unused ones)."""
    plan = compile(rec)
    chain = plan.chain
    names = ["encoded"]
    if chain.crop1:
        names += ["anchor1", "shape1"]
    if chain.resize:
        names.append("size")
    if chain.crop2:
        names += ["anchor2", "shape2"]
    names.append("flip")
    return tuple(names) + plan.photo_inputs()


def build_pipeline(
    rec: Recipe,
    *,
    batch_size: int,
    device_id: int | None,
    num_threads: int = 2,
    prefetch_queue_depth: int = 1,
    seed: int = 0,
):
    """A built DALI pipeline for ``rec``; feed it the `used_inputs` with ``feed_input``."""
    import nvidia.dali.math as dmath
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.types import DALIDataType as dt  # in its .pyi; types.UINT8 etc. are set at run time

    plan = compile(rec)
    chain = plan.chain
    d = Dali(fn, types, dmath)
    gpu = device_id is not None
    layout = rec.layout

    def source(name, dtype, ndim):
        return fn.external_source(name=name, dtype=dtype, ndim=ndim)

    # DALI's .pyi overloads of pipeline_def omit exec_dynamic, which it takes (**pipeline_kwargs)
    @pipeline_def(
        batch_size=batch_size,
        num_threads=num_threads,
        device_id=device_id,  # type: ignore[call-overload]
        prefetch_queue_depth=prefetch_queue_depth,
        seed=seed,
        exec_dynamic=True,
    )
    def graph():
        encoded = source("encoded", dt.UINT8, 1)
        decoder_device = "mixed" if gpu else "cpu"
        img: Any  # a DataNode (DALI's .pyi also allows a list of them, or None)
        if chain.crop1:
            img = fn.decoders.image_slice(
                encoded,
                source("anchor1", dt.FLOAT, 1),
                source("shape1", dt.FLOAT, 1),
                device=decoder_device,
                normalized_anchor=False,
                normalized_shape=False,
                **decoder_options(types),
            )
        else:
            img = fn.decoders.image(encoded, device=decoder_device, **decoder_options(types))
        if chain.resize:
            img = OP_FUNCTIONS[Resize](d, img, source("size", dt.FLOAT, 1))
        if chain.crop2:
            img = OP_FUNCTIONS[Crop](d, img, source("anchor2", dt.FLOAT, 1), source("shape2", dt.FLOAT, 1))
        img = photo_graph(img, plan, source, d)  # per-pixel or symmetric: commutes with the mirror
        return OP_FUNCTIONS[Flip](d, img, source("flip", dt.INT32, 0), layout)

    pipe = graph()
    pipe.build()
    return pipe


def build_photo_pipeline(rec: Recipe, *, batch_size: int, num_threads: int = 1, device_id: int | None = None):
    """A DALI pipeline of the recipe's photometric stages alone: input ``"image"`` (uint8 HWC
    images), then the ``photo<j>`` inputs (see `photo`). For engine tests and benchmarks."""
    import nvidia.dali.math as dmath
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.types import DALIDataType as dt

    plan = compile(rec)
    d = Dali(fn, types, dmath)

    def source(name, dtype, ndim):
        return fn.external_source(name=name, dtype=dtype, ndim=ndim)

    @pipeline_def(
        batch_size=batch_size,
        num_threads=num_threads,
        device_id=device_id,  # type: ignore[call-overload]
        prefetch_queue_depth=1,
        exec_dynamic=True,
    )  # (exec_dynamic: as above)
    def graph():
        img = fn.external_source(name="image", dtype=dt.UINT8, ndim=3, layout="HWC")
        return photo_graph(img, plan, source, d)

    pipe = graph()
    pipe.build()
    return pipe
