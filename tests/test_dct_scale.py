"""DCT-scaled decode (``Decode(dct_scaling=True)``): the pure plan, its pixels against the full
decode on every chroma subsampling and on crops touching each edge, the CPU lanes identical to
each other, bad files named as before, and the default unchanged."""

from __future__ import annotations

import io

import numpy as np
import pytest
import simplejpeg
import torch
from PIL import Image

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import SampleError
from hybridload._kernels.batch import process_payload
from hybridload._kernels.dct_scale import MARGIN, ScaledDecode, plan_scaled_decode, scaled_ops
from hybridload._kernels.decode import decode_image
from hybridload._kernels.geometry import apply_ops
from hybridload.recipe._ops import Crop, Flip, Resize
from hybridload.sources import SampleRef

from support.photos import photo_pixels
from support.streams import local_lane_streams

SCALED = recipe.Recipe([recipe.Decode(dct_scaling=True), recipe.RandomResizedCrop(24), recipe.HorizontalFlip()])
FULL = recipe.Recipe([recipe.Decode(), recipe.RandomResizedCrop(24), recipe.HorizontalFlip()])


@pytest.mark.parametrize(
    "crop, out, want",
    [
        (Crop(0, 0, 2000, 2000), Resize(224, 224), 4),  # 2000/4 = 500 >= 2 * 224; 2000/8 = 250 is not
        (Crop(0, 0, 2000, 1600), Resize(224, 224), 2),  # 1600/4 = 400 < 448: the height decides
        (Crop(0, 0, 3600, 3600), Resize(224, 224), 8),
        (Crop(10, 10, 900, 900), Resize(224, 224), 2),
        (Crop(10, 10, 895, 900), Resize(224, 224), None),  # 895 // 2 = 447 < 448
        (Crop(0, 0, 4000, 500), Resize(224, 224), None),  # wide enough, not tall enough
        (Crop(-5, 0, 2000, 2000), Resize(224, 224), None),  # reaches outside the image: full decode
        (Crop(2001, 2000, 2000, 2000), Resize(224, 224), 4),  # touches the right and bottom edges
        (Crop(2002, 0, 2000, 2000), Resize(224, 224), None),  # one pixel past the right edge
    ],
)
def test_the_plan_takes_the_largest_factor_that_keeps_the_margin(crop, out, want):
    plan = plan_scaled_decode(4001, 4000, [crop, out, Flip()])
    assert (plan.denominator if plan else None) == want
    if plan:
        assert plan == ScaledDecode(want, -(-4001 // want), -(-4000 // want))
        assert crop.w // want >= MARGIN * out.w and crop.h // want >= MARGIN * out.h


@pytest.mark.parametrize(
    "crop, gap, want",
    [
        (Crop(0, 0, 2000, 2000), 1.0, 8),  # 2000 // 8 = 250 >= 224: the smallest scale covering the output
        (Crop(0, 0, 1792, 1792), 1.0, 8),  # exactly 224 at 1/8
        (Crop(0, 0, 1791, 1791), 1.0, 4),  # 223 at 1/8: one short
        (Crop(0, 0, 300, 300), 1.0, None),  # 150 at 1/2 < 224: the full decode
        (Crop(0, 0, 2000, 2000), 1.5, 4),  # 2000 // 4 = 500 >= 336; 250 < 336
        (Crop(0, 0, 2000, 2000), 2.0, 4),  # the default gap (MARGIN)
    ],
)
def test_the_plan_keeps_the_recipes_reducing_gap(crop, gap, want):
    plan = plan_scaled_decode(4001, 4000, [crop, Resize(224, 224)], gap)
    assert (plan.denominator if plan else None) == want


def test_a_gap_of_one_still_never_upscales():
    rng = np.random.default_rng(1)
    for _ in range(2000):
        W, H = int(rng.integers(500, 5000)), int(rng.integers(500, 5000))
        w, h = int(rng.integers(1, W + 1)), int(rng.integers(1, H + 1))
        crop, out = Crop(int(rng.integers(0, W - w + 1)), int(rng.integers(0, H - h + 1)), w, h), Resize(224, 160)
        plan = plan_scaled_decode(W, H, [crop, out], 1.0)
        if plan is not None:
            c = scaled_ops([crop, out], plan.denominator, plan.min_width, plan.min_height)[0]
            assert c.w >= out.w and c.h >= out.h, (W, H, crop, plan)


def test_no_scaled_decode_unless_the_ops_start_with_crop_then_resize():
    assert plan_scaled_decode(4000, 3000, [Resize(300, 400), Crop(0, 0, 224, 224)]) is None
    assert plan_scaled_decode(4000, 3000, [Crop(0, 0, 3000, 3000)]) is None
    assert plan_scaled_decode(4000, 3000, []) is None


def test_the_mapped_crop_stays_inside_and_keeps_the_resize_shrinking():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        W, H = int(rng.integers(500, 5000)), int(rng.integers(500, 5000))
        w, h = int(rng.integers(1, W + 1)), int(rng.integers(1, H + 1))
        crop, out = Crop(int(rng.integers(0, W - w + 1)), int(rng.integers(0, H - h + 1)), w, h), Resize(64, 48)
        plan = plan_scaled_decode(W, H, [crop, out])
        if plan is None:
            continue
        sw, sh = plan.min_width, plan.min_height
        c = scaled_ops([crop, out], plan.denominator, sw, sh)[0]
        assert 0 <= c.x and 0 <= c.y and c.x + c.w <= sw and c.y + c.h <= sh
        assert c.w >= out.w and c.h >= out.h
        assert abs(c.x - crop.x / plan.denominator) <= 0.5 + 1e-9


def _photo(subsampling: str, gray: bool = False, size=(1203, 901)) -> bytes:
    """A photo-like JPEG (smooth shapes and texture) of ``size`` at one chroma subsampling."""
    img = photo_pixels(size)
    if gray:
        buf = io.BytesIO()
        Image.fromarray(img).convert("L").save(buf, "JPEG", quality=90)
        return buf.getvalue()
    return simplejpeg.encode_jpeg(img, quality=90, colorsubsampling=subsampling)


@pytest.mark.parametrize("gap", [2.0, 1.0])
@pytest.mark.parametrize("subsampling, gray", [("444", False), ("422", False), ("420", False), ("420", True)])
def test_scaled_pixels_stay_close_to_the_full_decode_on_every_subsampling(subsampling, gray, gap):
    data = _photo(subsampling, gray)
    means, scaled = [], 0
    rec = recipe.Recipe(
        [recipe.Decode(dct_scaling=True, reducing_gap=gap), recipe.RandomResizedCrop(24), recipe.HorizontalFlip()]
    )
    for i in range(24):
        ref = SampleRef(i, "photo.jpg", 0)
        full = process_payload(ref, data, FULL, 0, 0).float()
        fast = process_payload(ref, data, rec, 0, 0).float()
        params = rec.sample_params(0, 0, i, 1203, 901)
        scaled += plan_scaled_decode(1203, 901, params.ops, gap) is not None
        means.append((full - fast).abs().mean().item())
    assert scaled >= 12  # most crops of a 1203x901 photo to 24 px are scaled
    assert np.mean(means) <= 2.0 and max(means) <= 6.0, means


def test_crops_touching_each_edge_decode_to_the_full_decodes_pixels_within_tolerance():
    data = _photo("420")
    arr = decode_image(data)
    out = Resize(32, 32)
    for crop in (Crop(0, 0, 400, 300), Crop(803, 0, 400, 300), Crop(0, 601, 400, 300), Crop(803, 601, 400, 300)):
        plan = plan_scaled_decode(1203, 901, [crop, out])
        assert plan is not None and plan.denominator == 4
        small = decode_image(data, plan)
        assert small.shape == (plan.min_height, plan.min_width, 3)
        fast = apply_ops(small, scaled_ops([crop, out], plan.denominator, small.shape[1], small.shape[0])).float()
        full = apply_ops(arr, [crop, out]).float()
        assert (fast - full).abs().mean().item() <= 2.0


def test_the_default_keeps_the_full_decodes_exact_pixels(photo_root):
    src = sources.ImageFolder(photo_root)
    for i in range(6):
        ref = src.ref(i)
        payload, _ = src.read(ref)
        params = FULL.sample_params(3, 1, i, *Image.open(ref.location).size)
        want = apply_ops(decode_image(payload), params.ops).permute(2, 0, 1)
        assert torch.equal(process_payload(ref, payload, FULL, 3, 1), want)


def test_every_cpu_lane_gives_the_same_scaled_stream(photo_root):
    runs, _ = local_lane_streams(sources.ImageFolder(photo_root), SCALED, 7, seed=5, epochs=(0,), threads=2)
    assert runs["processes"] == runs["threads"] and len(runs["threads"]) == 9
    with HybridLoader(
        sources.ImageFolder(photo_root),
        FULL,
        7,
        seed=5,
        device="cpu",
        return_indices=True,
        policy=LoaderPolicy(local_workers="threads", threads=2),
    ) as ld:
        full = [images for images, _labels, _idx in ld]
    with HybridLoader(
        sources.ImageFolder(photo_root),
        SCALED,
        7,
        seed=5,
        device="cpu",
        return_indices=True,
        policy=LoaderPolicy(local_workers="threads", threads=2),
    ) as ld:
        fast = [images for images, _labels, _idx in ld]
    assert any(not torch.equal(a, b) for a, b in zip(full, fast))  # the option does something here


@pytest.mark.parametrize("kind", ["truncated", "corrupt", "huge", "text", "zero"])
def test_bad_files_get_the_same_named_error_as_with_the_full_decode(bad_files, kind):
    src = sources.FileList([bad_files[kind]])
    errors = []
    for rec in (FULL, SCALED):
        with HybridLoader(src, rec, 1, device="cpu", policy=LoaderPolicy(cpu_actors=0, threads=1)) as ld:
            with pytest.raises(SampleError) as info:
                list(ld)
        errors.append((info.value.index, info.value.path, info.value.stage, info.value.reason))
    assert errors[0] == errors[1]
    assert errors[0][2] in ("Decode", "read")
