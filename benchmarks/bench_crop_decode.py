#!/usr/bin/env python
"""Decode only the crop (issue 37): the two no-compiler routes against today's full decode.

Per image, one thread, from the encoded bytes in memory to the 224x224 RandomResizedCrop +
flip output (every call's overhead included: ctypes, header parsing, array wrapping):

- ``alone``: the full decode alone (simplejpeg, libjpeg-turbo), no crop, no resize: the roofline.
- ``full``: today's kernel: full decode, crop, antialiased resize, flip.
- ``full+dct``: today's ``Decode(dct_scaling=True)``: the whole image at 1/2, 1/4, 1/8, then crop.
- ``turbo``: TurboJPEG 3's cropping region (``kernels/turbo.py``) at full scale, then resize, flip.
- ``turbo+dct``: the cropping region at the DCT scale ``dct_scale.plan_scaled_decode`` picks.
- ``nvimgcodec``: nvImageCodec's CPU-only backend decoding the region (it has no DCT scale).

Each route through ``kernels.crop_window.window_decode``'s mapping, so the boxes are the
recipe's keyed boxes (seed 0, ``--draws`` per image). Sets: the photo set (ImageNet-size,
~350-400 px short side) and 12 MP photos (the photo set scaled to 4000x3000 with grain, as
bench_large_photos.py makes them), each baseline and progressive, all 4:2:0 quality 90.
"""

from __future__ import annotations

import io
import logging
import sys

import numpy as np
import simplejpeg
import torch
from PIL import Image

import _harness as h
from _data import parser, photo_source
from bench_large_photos import large_photo_set
from hybridload import recipe, sources
from hybridload.kernels import crop_window, turbo
from hybridload.kernels.decode import decode_image
from hybridload.kernels.dct_scale import plan_scaled_decode, scaled_ops
from hybridload.kernels.geometry import apply_ops

log = logging.getLogger("bench_crop_decode")
REC = recipe.Recipe([recipe.Decode(), recipe.RandomResizedCrop(224), recipe.HorizontalFlip()])


NV: dict = {}  # the nvImageCodec module and its CPU-only decoder, made on first use


def _nv():
    if not NV:
        from nvidia import nvimgcodec as nv

        NV.update(
            mod=nv,
            dec=nv.Decoder(device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY, backends=[nv.Backend(nv.BackendKind.CPU_ONLY)]),
        )
    return NV["mod"], NV["dec"]


def _have_nvimgcodec() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("nvidia.nvimgcodec") is not None
    except ModuleNotFoundError:
        return False


def route_alone(item):
    return simplejpeg.decode_jpeg(item[0], colorspace="RGB", strict=True)


def route_full(item):
    return apply_ops(decode_image(item[0]), item[1])


def route_full_dct(item):
    data, ops = item[0], item[1]
    plan = plan_scaled_decode(item[2], item[3], ops)
    arr = decode_image(data, plan)
    return apply_ops(arr, ops if plan is None else scaled_ops(ops, plan.denominator, arr.shape[1], arr.shape[0]))


def _window(dct: bool):
    def run(item):
        got = crop_window.window_decode(item[0], (item[2], item[3]), item[1], dct)
        return apply_ops(*got) if got is not None else route_full(item)

    return run


def route_nv(item):
    data, ops = item[0], item[1]
    c, (nv, dec) = ops[0], _nv()
    img = dec.decode(nv.CodeStream(data).get_sub_code_stream(region=nv.Region(c.y, c.x, c.y + c.h, c.x + c.w)))
    return apply_ops(np.asarray(img.cpu()), (type(c)(0, 0, c.w, c.h), *ops[1:]))


ROUTES = {
    "alone": route_alone,
    "full": route_full,
    "full+dct": route_full_dct,
    "turbo": _window(False),
    "turbo+dct": _window(True),
    "nvimgcodec": route_nv,
}


def reencode(data: bytes, progressive: bool) -> bytes:
    with Image.open(io.BytesIO(data)) as im:
        out = io.BytesIO()
        im.convert("RGB").save(out, "JPEG", quality=90, subsampling=2, progressive=progressive)
    return out.getvalue()


def items_of(source, draws: int, progressive: bool) -> list:
    items = []
    for i in range(len(source)):
        data = reencode(source.read(source.ref(i))[0], progressive)
        w, hgt = Image.open(io.BytesIO(data)).size
        for d in range(draws):
            items.append((data, REC.sample_params(0, d, i, w, hgt).ops, w, hgt))
    return items


def main(argv=None) -> int:
    ap = parser(__doc__, quick=dict(n=8, rounds=1, warmup_rounds=0), n=64, rounds=3, size=224)
    ap.add_argument("--large", type=int, default=8, help="how many 12 MP photos")
    ap.add_argument("--draws", type=int, default=3, help="crop boxes drawn per image")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if not turbo.available():
        raise SystemExit("the turbojpeg wheel is not installed: pip install turbojpeg")
    _, photos = photo_source(args.root, args.n, log)
    large = sources.ImageFolder(large_photo_set(args.root, photos, args.large))
    sets = {}
    for label, src in (("photos", photos), ("12MP", large)):
        for mode in ("base", "prog"):
            sets[f"{label}/{mode}"] = items_of(src, args.draws, mode == "prog")
    cs = [
        h.per_item(f"{s}/{r}", fn, items)
        for s, items in sets.items()
        for r, fn in ROUTES.items()
        if r != "nvimgcodec" or _have_nvimgcodec()
    ]
    results = h.set_up_and_run(cs, args.rounds, args.warmup_rounds, log)
    ratios = {}
    for s in sets:
        for r in ("full+dct", "turbo", "turbo+dct", "nvimgcodec"):
            ratios[f"{s}: {r} / full"] = h.ratio(results, f"{s}/{r}", f"{s}/full", "images_per_cpu_s")
        for r in ("full", "turbo", "turbo+dct"):
            ratios[f"{s}: {r} / alone"] = h.ratio(results, f"{s}/{r}", f"{s}/alone", "images_per_cpu_s")
    lines = [
        f"## bench_crop_decode: {args.n} photos + {args.large} 12 MP photos, {args.draws} boxes each, "
        f"{args.rounds} interleaved rounds, RandomResizedCrop(224) + flip, 1 thread\n",
        h.environment_line(h.environment()),
        *h.results_table(results),
        "",
        h.CONTENTION_NOTE,
        "",
        *h.ratio_table(ratios),
        "",
    ]
    h.emit(lines, args, {"benchmark": "bench_crop_decode", "contestants": results, "ratios": ratios}, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
