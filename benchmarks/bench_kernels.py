#!/usr/bin/env python
"""hybridload's CPU kernels, per core, against DALI's CPU pipeline and Pillow; one suite a run.

Every suite: RandomResizedCrop(224) + random flip, uint8 CHW, ``torch.set_num_threads(1)``, in
interleaved rounds (method: _harness.py; ``stages`` times per image).

``--suite dali`` (the default): ``kernels`` 1t (``process_sample`` in a loop) and 2t
(ThreadPoolExecutor(2) over ``process_batch``); ``dali`` 1t/2t (_contestants.DaliFiles);
``pillow-ref`` (open + convert + crop + resize(BILINEAR) + flip, same boxes and flips); decode
only from bytes: Pillow vs simplejpeg. Goal: kernels >= 1.0x DALI's CPU pipeline (same thread
count, ratio of medians). Photometric rows (_photo_contestants.py): each colour/blur/erase
kernel against DALI's CPU operator for it, one thread, on the decoded images
(``--no-photometric`` skips them, ``--photometric-only`` runs only them).

``--suite large``: ``full`` (``Decode()``) against ``dct`` (``Decode(dct_scaling=True)``:
libjpeg-turbo's 1/2, 1/4, 1/8 scaled decode where the crop keeps at least twice the output's
pixels), 1 and 2 threads, on 12 MP photos (the photo set scaled to 4000x3000 with a little
grain, about 1.5-2 MB each at quality 90, 4:2:0, written once under ``ROOT/large-n<N>``) and on
the photo set, beside DALI's CPU pipeline; the pixel rows give mean and largest |dct - full|.
Goal: ``dct`` >= 2x ``full`` on large photos; no loss on the photo set.

``--suite crop``: decoding only the crop (issue 37), per image, one thread, from the bytes in
memory: ``alone`` (the full decode, no crop: the roofline), ``full`` (full decode, crop,
antialiased resize, flip), ``full+dct``, ``turbo`` (TurboJPEG 3's cropping region,
``_kernels/turbo.py``), ``turbo+dct`` (the region at the DCT scale ``plan_scaled_decode``
picks), ``nvimgcodec`` (nvImageCodec's CPU-only backend, no DCT scale), each through
``_kernels.crop_window.window_decode``'s mapping (the recipe's keyed boxes, ``--draws`` per
image), on the photo set and ``--large`` 12 MP photos, baseline and progressive.

``--suite stages``: the kernel stage by stage beyond the decode (thread CPU ms per image, one
thread, RandomResizedCrop(224) + flip always) on the photo set, ``varied`` (it re-encoded at sides
of 300-600 px, every fourth progressive) and ``--large`` 12 MP photos: ``read``, ``header``,
``params`` (keyed box and flip: a generator per ``sample``, or the ``batch``'s made at once and
shared out), ``decode`` (the window), ``crop``, ``resize`` (into a kept buffer), ``flip+layout``
(the mirrored write), one sample at a time; ``process_payload`` with either generator, the lanes'
``process_payloads`` over a group (``kernel/group``), and ``alone`` (the full decode: the
roofline). Not the harness's rounds: per group of images every variant runs back to back in a
rotating order, so the box's load drift hits them alike.
Beside them, on the same folders, DALI's CPU pipeline stage by stage (``_dali_stages.py``: nested
pipelines, ``readers.file`` -> ``decoders.image_random_crop`` -> ``resize`` ->
``crop_mirror_normalize``, one thread, process CPU per image; skipped with ``--no-dali``), the
two taking turns round by round.

    python benchmarks/bench_kernels.py [--no-dali] [--no-photometric | --photometric-only]
    python benchmarks/bench_kernels.py --suite large --n 24
    python benchmarks/bench_kernels.py --suite crop --n 64 --large 8 --draws 3
    python benchmarks/bench_kernels.py --suite stages --n 128 --large 8 --rounds 5
"""

from __future__ import annotations

import io
import logging
import sys
import time
from pathlib import Path

import numpy as np
import simplejpeg
import torch
from PIL import Image

import _harness as h
from _contestants import DaliFiles, KernelBatches
from _dali_stages import DALI_STAGES, DaliStages
from _photo_contestants import GOALS as PHOTO_GOALS, NOTE as PHOTO_NOTE, RATIOS as PHOTO_RATIOS, photo_contestants
from _data import parser, photo_source
from hybridload import _kernels as kernels, recipe, sources
from hybridload._kernels import crop_window, turbo
from hybridload._kernels.batch import GROUP, process_payload, process_payloads
from hybridload._kernels.decode import decode_image, jpeg_size
from hybridload._kernels.dct_scale import plan_scaled_decode, scaled_ops
from hybridload._kernels.geometry import apply_ops, crop, resize_kept
from hybridload._kernels.jpeg_check import check_jpeg
from hybridload.recipe._core import sample_generators
from hybridload.recipe._ops import Crop, Flip, Resize
from hybridload.sources import SampleRef

log = logging.getLogger("bench_kernels")

GOALS = {"kernels / DALI, 1 thread": 1.0, "kernels / DALI, 2 threads": 1.0}
RATIOS = {  # name: (a, b, field)
    "kernels / DALI, 1 thread": ("kernels/1t", "dali/1t", "images_per_s"),
    "kernels / DALI, 2 threads": ("kernels/2t", "dali/2t", "images_per_s"),
    "kernels / DALI per CPU-second, 1 thread": ("kernels/1t", "dali/1t", "images_per_cpu_s"),
    "kernels / DALI per CPU-second, 2 threads": ("kernels/2t", "dali/2t", "images_per_cpu_s"),
    "kernels / pillow-ref, 1 thread": ("kernels/1t", "pillow-ref/1t", "images_per_s"),
    "simplejpeg / Pillow decode, 1 thread": ("simplejpeg-decode/1t", "pillow-decode/1t", "images_per_s"),
    "kernels 2 threads / 1 thread": ("kernels/2t", "kernels/1t", "images_per_s"),
    "DALI 2 threads / 1 thread": ("dali/2t", "dali/1t", "images_per_s"),
}


def pillow_reference(source, rec):
    """The straightforward Pillow pipeline, torchvision style, with the kernels' crop boxes."""

    def one(i: int) -> torch.Tensor:
        with Image.open(source.ref(i).location) as im:
            img = im.convert("RGB")
        for op in rec.sample_params(0, 0, i, img.width, img.height).ops:
            if isinstance(op, Crop):
                img = img.crop((op.x, op.y, op.x + op.w, op.y + op.h))
            elif isinstance(op, Resize):
                img = img.resize((op.w, op.h), Image.BILINEAR)
            elif isinstance(op, Flip):
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.array(img)).permute(2, 0, 1).contiguous()  # as torchvision's pil_to_tensor

    return one


def pillow_decode(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        return np.asarray(im if im.mode == "RGB" else im.convert("RGB"))


LARGE_GOALS = {
    "large: dct / full, 1 thread": 2.0,
    "large: dct / full, 2 threads": 2.0,
    "large: dct / DALI, 2 threads": 1.5,
}
LARGE_RATIOS = {
    "large: dct / full, 1 thread": ("large/dct/1t", "large/full/1t", "images_per_s"),
    "large: dct / full, 2 threads": ("large/dct/2t", "large/full/2t", "images_per_s"),
    "large: dct / full per CPU-second, 2 threads": ("large/dct/2t", "large/full/2t", "images_per_cpu_s"),
    "large: dct / DALI, 2 threads": ("large/dct/2t", "large/dali/2t", "images_per_s"),
    "large: full / DALI, 2 threads": ("large/full/2t", "large/dali/2t", "images_per_s"),
    "photos: dct / full, 1 thread": ("photos/dct/1t", "photos/full/1t", "images_per_s"),
    "photos: dct / full, 2 threads": ("photos/dct/2t", "photos/full/2t", "images_per_s"),
}


def large_photo_set(root: Path, photos: sources.ImageFolder, n: int) -> Path:
    """``n`` 4000x3000 JPEGs made from the photo set (one class folder), written once."""
    folder = Path(root) / f"large-n{n}" / "class_0"
    if len(list(folder.glob("*.jpg"))) == n:
        return folder.parent
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        with Image.open(photos.ref(i % len(photos)).location) as im:
            big = np.asarray(im.convert("RGB").resize((4000, 3000), Image.BICUBIC), dtype=np.int16)
        grain = rng.integers(-2, 3, big.shape, dtype=np.int16)
        data = simplejpeg.encode_jpeg((big + grain).clip(0, 255).astype(np.uint8), quality=90, colorsubsampling="420")
        (folder / f"img_{i:03d}.jpg").write_bytes(data)
    return folder.parent


def pixel_rows(source, full, dct, n: int) -> list[str]:
    """Mean and largest |dct - full| per image over the first ``n`` samples (epoch 0)."""
    means, peaks = [], []
    for i in range(min(n, len(source))):
        a = kernels.process_sample(source, full, i, seed=0, epoch=0)[0].float()
        b = kernels.process_sample(source, dct, i, seed=0, epoch=0)[0].float()
        means.append((a - b).abs().mean().item())
        peaks.append((a - b).abs().max().item())
    return [f"{np.mean(means):.2f}", f"{np.max(means):.2f}", f"{np.max(peaks):.0f}"]


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


def reencode(data: bytes, progressive: bool, size: tuple[int, int] | None = None) -> bytes:
    with Image.open(io.BytesIO(data)) as im:
        out, rgb = io.BytesIO(), im.convert("RGB")
        (rgb.resize(size, Image.BICUBIC) if size else rgb).save(
            out, "JPEG", quality=90, subsampling=2, progressive=progressive
        )
    return out.getvalue()


def items_of(source, draws: int, progressive: bool) -> list:
    items = []
    for i in range(len(source)):
        data = reencode(source.read(source.ref(i))[0], progressive)
        w, hgt = Image.open(io.BytesIO(data)).size
        for d in range(draws):
            items.append((data, REC.sample_params(0, d, i, w, hgt).ops, w, hgt))
    return items


def per_item(name: str, source, rec) -> h.Contestant:
    return h.per_item(name, lambda i: kernels.process_sample(source, rec, i, seed=0, epoch=0), range(len(source)))


def suite_dali(args, env) -> tuple[list, dict, dict, list[str]]:
    """(contestants, ratio definitions, goals, lines after the ratios)."""
    folder, source = photo_source(args.root, args.n, log)
    rec = recipe.imagenet_train(args.size)
    payloads = [open(source.ref(i).location, "rb").read() for i in range(len(source))]

    def dali_c(t):
        return [DaliFiles(folder, args.n, t, args.batch_size, args.size, name=f"dali/{t}t")] if env.get("dali") else []

    cs = (
        []
        if args.photometric_only
        else [
            per_item("kernels/1t", source, rec),
            *dali_c(1),
            KernelBatches("kernels/2t", source, rec, args.batch_size, threads=2, shuffle=False),
            *dali_c(2),
            h.per_item("pillow-ref/1t", pillow_reference(source, rec), range(args.n)),
            h.per_item("pillow-decode/1t", pillow_decode, payloads),
            h.per_item("simplejpeg-decode/1t", lambda d: simplejpeg.decode_jpeg(d, colorspace="RGB"), payloads),
        ]
    )
    ratio_defs, goals = ({}, {}) if args.photometric_only else (dict(RATIOS), dict(GOALS))
    if args.no_photometric:
        return cs, ratio_defs, goals, []
    crop = recipe.make(
        [recipe.Decode(), recipe.Resize(args.size), recipe.CenterCrop(args.size), recipe.ToTensor(layout="HWC")]
    )
    decoded = [kernels.process_sample(source, crop, i, seed=0, epoch=0)[0].numpy() for i in range(args.n)]
    cs += photo_contestants(decoded, args.batch_size, dali=bool(env.get("dali")))
    ratio_defs.update(PHOTO_RATIOS if env.get("dali") else {})
    goals.update(PHOTO_GOALS if env.get("dali") else {})
    return cs, ratio_defs, goals, [PHOTO_NOTE, ""]


def suite_large(args, env) -> tuple[list, dict, dict, list[str]]:
    _, photos = photo_source(args.root, max(args.n, 64), log)
    large_root = large_photo_set(args.root, photos, args.n)
    large = sources.ImageFolder(large_root)
    full = recipe.Recipe([recipe.Decode(), recipe.RandomResizedCrop(args.size), recipe.HorizontalFlip()])
    dct = recipe.Recipe([recipe.Decode(dct_scaling=True), recipe.RandomResizedCrop(args.size), recipe.HorizontalFlip()])
    cs = []
    for label, src in (("large", large), ("photos", photos)):
        for kind, rec in (("full", full), ("dct", dct)):
            cs += [
                per_item(f"{label}/{kind}/1t", src, rec),
                KernelBatches(f"{label}/{kind}/2t", src, rec, args.batch_size, threads=2, shuffle=False),
            ]
    if env.get("dali"):
        cs.append(DaliFiles(large_root, args.n, 2, args.batch_size, args.size, name="large/dali/2t"))
    pixels = h.markdown_table(
        ["set", "mean abs(dct - full), average", "worst image", "largest"],
        [
            ["large (12 MP)", *pixel_rows(large, full, dct, args.n)],
            [f"photos (first {args.n})", *pixel_rows(photos, full, dct, args.n)],
        ],
    )
    return cs, LARGE_RATIOS, LARGE_GOALS, [*pixels, ""]


def suite_crop(args, env) -> tuple[list, dict, dict, list[str]]:
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
    ratio_defs = {}
    for s in sets:
        for r in ("full+dct", "turbo", "turbo+dct", "nvimgcodec"):
            ratio_defs[f"{s}: {r} / full"] = (f"{s}/{r}", f"{s}/full", "images_per_cpu_s")
        for r in ("full", "turbo", "turbo+dct"):
            ratio_defs[f"{s}: {r} / alone"] = (f"{s}/{r}", f"{s}/alone", "images_per_cpu_s")
    return cs, ratio_defs, {}, []


STAGE_REC = recipe.Recipe([recipe.Decode(), recipe.RandomResizedCrop(224), recipe.HorizontalFlip(1.0)])
STAGES = ("read", "header", "params/sample", "params/batch", "decode", "crop", "resize", "flip+layout")
STAGE_COLS = (*STAGES, "kernel/sample", "kernel/batch", "kernel/group", "alone")


def varied_set(root: Path, photos: sources.ImageFolder) -> sources.ImageFolder:
    """The photo set re-encoded at sides of 300-600 px, every fourth progressive, written once."""
    folder, rng = Path(root) / f"varied-n{len(photos)}" / "class_0", np.random.default_rng(0)
    if len(list(folder.glob("*.jpg"))) != len(photos):
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(len(photos)):
            size = tuple(int(v) for v in rng.integers(300, 601, 2))
            data = reencode(photos.read(photos.ref(i))[0], i % 4 == 3, size)  # type: ignore[arg-type]
            (folder / f"img_{i:03d}.jpg").write_bytes(data)
    return sources.ImageFolder(folder.parent)


def stage_times(data: bytes, i: int, rnd: int, keyed, out: torch.Tensor) -> np.ndarray:
    """Thread CPU seconds of each stage after ``read`` (STAGES[1:]) for one image, one sample at
    a time: the crop a view of the window, the resize into the thread's kept array and the flip
    in the write, as `process_payload`."""
    t = [time.thread_time()]
    lap = lambda v: (t.append(time.thread_time()), v)[1]  # noqa: E731  (the value, its time taken)
    size = lap((check_jpeg(data), jpeg_size(data))[1])
    ops = lap(STAGE_REC.sample_params(0, rnd, i, *size).ops)
    lap(STAGE_REC.sample_params(0, rnd, i, *size, generator=lambda: keyed.generator(i)))
    got = crop_window.window_decode(data, size, ops)
    arr, ops = lap(got if got is not None else (decode_image(data), ops))
    c = ops[0]
    img = lap(arr[c.y : c.y + c.h, c.x : c.x + c.w] if got is not None else crop(torch.from_numpy(arr), c).numpy())
    img = lap(resize_kept(img, ops[1]))
    lap(np.copyto(out.numpy()[:, :, ::-1], img.transpose(2, 0, 1)))
    return np.diff(t)


def stage_round(src: sources.ImageFolder, rnd: int) -> dict[str, float]:
    """{stage or variant: thread CPU seconds per image} over the set, a group of `GROUP` images
    at a time, the variants in turn (``kernel/group``: `process_payloads`, the lanes' job)."""
    n, t0 = len(src), time.thread_time()
    out = torch.empty((GROUP, 3, 224, 224), dtype=torch.uint8)
    tot = dict.fromkeys(STAGE_COLS, 0.0)
    keyed = sample_generators(0, rnd, np.arange(n))
    tot["params/batch"] = time.thread_time() - t0
    for g0 in range(0, n, GROUP):
        group = range(g0, min(n, g0 + GROUP))
        t0 = time.thread_time()
        datas = [src.read(src.ref(i))[0] for i in group]
        tot["read"] += time.thread_time() - t0
        refs = [SampleRef(i, "x.jpg", 0) for i in group]
        gens = [lambda i=i: keyed.generator(i) for i in group]
        jobs = {
            "stages": lambda: [stage_times(d, i, rnd, keyed, out[j]) for j, (i, d) in enumerate(zip(group, datas))],
            "kernel/sample": lambda: [
                process_payload(r, d, STAGE_REC, 0, rnd, out[j]) for j, (r, d) in enumerate(zip(refs, datas))
            ],
            "kernel/batch": lambda: [
                process_payload(r, d, STAGE_REC, 0, rnd, out[j], gens[j]) for j, (r, d) in enumerate(zip(refs, datas))
            ],
            "kernel/group": lambda: process_payloads(
                refs, datas, STAGE_REC, 0, rnd, out, lambda j: keyed.generator(g0 + j)
            ),
            "alone": lambda: [decode_image(d).shape for d in datas],  # each freed before the next
        }
        first = (g0 // GROUP + rnd) % len(jobs)
        for name in [*jobs][first:] + [*jobs][:first]:
            t0 = time.thread_time()
            got = jobs[name]()
            if name == "stages":
                for key, dt in zip(STAGES[1:], np.sum(got, axis=0)):
                    tot[key] += dt
            else:
                tot[name] += time.thread_time() - t0
    return {key: v / n for key, v in tot.items()}


#: The stage suite's rows beside DALI's: (row, hybridload's stages summed, DALI's stage).
BESIDE_DALI = (
    ("read", ("read",), "read"),
    ("decode (header, parameters, window, crop)", ("header", "params/batch", "decode", "crop"), "decode"),
    ("resize", ("resize",), "resize"),
    ("flip+layout", ("flip+layout",), "flip+layout"),
    ("whole (read + kernel/group)", ("read", "kernel/group"), "total"),
)


def suite_stages(args) -> int:
    photo_folder, photos = photo_source(args.root, args.n, log)
    large_root = large_photo_set(args.root, photos, args.large)
    varied = varied_set(args.root, photos)
    sets = (
        ("photos", photos, photo_folder),
        ("varied", varied, Path(args.root) / f"varied-n{len(photos)}"),
        ("12MP", sources.ImageFolder(large_root), large_root),
    )
    dali = h.dali_version(args.no_dali, log)
    rows, beside = [], []
    for label, src, folder in sets:
        pipes = DaliStages(folder, len(src), min(args.batch_size, len(src))) if dali else None
        per, per_dali = [], []
        try:
            for rnd in range(args.warmup_rounds + args.rounds):  # who goes first alternates
                for who in ("hybridload", "dali")[:: 1 if rnd % 2 else -1]:
                    if who == "hybridload":
                        per.append(stage_round(src, rnd))
                    elif pipes is not None:
                        per_dali.append(pipes.run(rnd))
        finally:
            if pipes is not None:
                pipes.close()
        per, per_dali = per[args.warmup_rounds :], per_dali[args.warmup_rounds :]
        med = {k: float(np.median([r[k] for r in per])) * 1e3 for k in STAGE_COLS}
        a, s, g = med["alone"], med["kernel/sample"], med["kernel/group"]
        rows.append([label, *(f"{med[k]:.3f}" for k in STAGE_COLS), f"{a / s:.2f}x", f"{a / g:.2f}x", f"{s / g:.3f}x"])
        if per_dali:
            dmed = {k: float(np.median([r[k] for r in per_dali])) * 1e3 for k in (*DALI_STAGES, "total")}
            for name, ours, theirs in BESIDE_DALI:
                hl = sum(med[k] for k in ours)
                beside.append([label, name, f"{hl:.3f}", f"{dmed[theirs]:.3f}", f"{dmed[theirs] / hl:.2f}x"])
    lines = [
        f"## bench_kernels --suite stages: {args.n} photos, {args.large} 12 MP photos, {args.rounds} rounds, "
        "RandomResizedCrop(224) + flip, 1 thread, thread CPU ms per image (median of rounds); "
        "the ratios are speed (alone's time / the kernel's)\n",
        h.environment_line(h.environment(dali=dali)),
        *h.markdown_table(["set", *STAGE_COLS, "sample / alone", "group / alone", "group / sample"], rows),
        "",
    ]
    if beside:
        lines += [
            "Beside DALI's CPU pipeline (readers.file, decoders.image_random_crop, resize, "
            "crop_mirror_normalize; one thread, process CPU ms per image of nested pipelines, their "
            "differences; the same rounds):\n",
            *h.markdown_table(["set", "stage", "hybridload", "DALI", "DALI / hybridload"], beside),
            "",
        ]
    doc = {"benchmark": "bench_kernels", "suite": "stages", "rows": rows, "beside_dali": beside}
    h.emit(lines, args, doc, log)
    return 0


SUITES = {"dali": suite_dali, "large": suite_large, "crop": suite_crop, "stages": suite_stages}
#: per suite, the defaults of the flags every suite shares: its size of a run
SUITE_DEFAULTS = {
    "dali": dict(n=1024, rounds=5, batch_size=64),
    "large": dict(n=24, rounds=3, batch_size=8),
    "crop": dict(n=64, rounds=3, batch_size=64),
    "stages": dict(n=128, rounds=5, batch_size=64),
}


def main(argv=None) -> int:
    ap = parser(__doc__, quick="n 64 (8 for large and crop), 1 round", n=None, rounds=None, batch_size=None, size=224)
    ap.add_argument("--suite", choices=SUITES, default="dali", help="which comparison (see the docstring)")
    ap.add_argument("--no-dali", action="store_true", help="skip the DALI contestants")
    ap.add_argument("--no-photometric", action="store_true", help="dali suite: skip the photometric kernels' rows")
    ap.add_argument("--photometric-only", action="store_true", help="dali suite: only the photometric kernels' rows")
    ap.add_argument("--large", type=int, default=8, help="crop and stages suites: how many 12 MP photos")
    ap.add_argument("--draws", type=int, default=3, help="crop suite: crop boxes drawn per image")
    args = ap.parse_args(argv)
    if args.no_photometric and args.photometric_only:
        ap.error("--no-photometric and --photometric-only exclude each other; pass one")
    for name, default in SUITE_DEFAULTS[args.suite].items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.quick:
        args.n, args.rounds, args.warmup_rounds = (64 if args.suite == "dali" else 8), 1, 0
    torch.set_num_threads(1)
    if args.suite == "stages":
        return suite_stages(args)
    env = h.environment(dali=h.dali_version(args.no_dali or args.suite == "crop", log))
    cs, ratio_defs, goals, after = SUITES[args.suite](args, env)
    results = h.set_up_and_run(cs, args.rounds, args.warmup_rounds, log)
    ratios = {k: h.ratio(results, a, b, f) for k, (a, b, f) in ratio_defs.items()}
    lines = [
        f"## bench_kernels --suite {args.suite}: {args.n} photo JPEGs"
        + (f" + {args.large} 12 MP photos, {args.draws} boxes each" if args.suite == "crop" else "")
        + f", {args.rounds} interleaved rounds (after {args.warmup_rounds} untimed), "
        f"RandomResizedCrop({args.size}) + flip, uint8 CHW\n",
        h.environment_line(env),
        *h.results_table(results),
        "",
        h.CONTENTION_NOTE,
        "",
        *h.ratio_table(ratios, goals),
        "",
        *after,
    ]
    doc = {"benchmark": "bench_kernels", "suite": args.suite, "environment": env, "contestants": results}
    h.emit(lines, args, {**doc, "ratios": ratios, "goals": h.goals_met(ratios, goals)}, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
