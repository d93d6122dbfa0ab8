"""Photometric kernels against straightforward Pillow / numpy references, and the two other
engines (the torch engine on CPU tensors, DALI's CPU-only mode) against the kernels, op by op
on the same uint8 input (so only the op's own rounding differs)."""

import colorsys
import glob
import os
import warnings

import numpy as np
import pytest
import torch
from PIL import Image, ImageEnhance, ImageOps

from hybridload.recipe import _ops as O
from hybridload import recipe as R
from hybridload._kernels.decode import decode_image
from hybridload._kernels.geometry import apply_ops
from hybridload._kernels.photometric import gaussian_kernel
from hybridload._torchops.ops import apply_ops as torch_apply

OPS = [
    O.Brightness(1.37),
    O.Brightness(0.55),
    O.Contrast(1.6),
    O.Contrast(0.45),
    O.Saturation(1.8),
    O.Saturation(0.2),
    O.Hue(0.12),
    O.Hue(-0.4),
    O.Grayscale(True),
    O.Blur(5, 1.3),
    O.Blur(23, 3.1),
    O.Posterize(3),
    O.Solarize(128.0),
    O.AutoContrast(),
]


@pytest.fixture(scope="module")
def images(photo_root):
    files = sorted(glob.glob(os.path.join(photo_root, "**", "*.jpg"), recursive=True))[:6]
    out = []
    for f in files:
        a = decode_image(open(f, "rb").read())
        out.append(np.ascontiguousarray(a[:48, :64]))  # small: the hue reference is per pixel
    return out


def _hue_ref(a, shift):
    out = np.empty(a.shape, np.float64)
    for idx in np.ndindex(a.shape[:2]):
        h, s, v = colorsys.rgb_to_hsv(*(a[idx] / 255.0))
        out[idx] = colorsys.hsv_to_rgb((h + shift) % 1.0, s, v)
    return (out * 255.999).astype(np.uint8)


def _blur_ref(a, k, sigma):
    w = np.exp(-0.5 * (np.linspace(-(k - 1) / 2, (k - 1) / 2, k) / sigma) ** 2)
    w2 = np.outer(w, w) / np.outer(w, w).sum()
    p = k // 2
    x = np.pad(a.astype(np.float64), ((p, p), (p, p), (0, 0)), mode="reflect")
    acc = sum(w2[i, j] * x[i : i + a.shape[0], j : j + a.shape[1]] for i in range(k) for j in range(k))
    return np.clip(np.rint(acc), 0, 255).astype(np.uint8)


def reference(a: np.ndarray, op) -> np.ndarray:
    """Pillow (ImageEnhance, ImageOps, convert("L")), colorsys, or a direct 2-D convolution."""
    im = Image.fromarray(a)
    if isinstance(op, O.Brightness):
        return np.asarray(ImageEnhance.Brightness(im).enhance(op.factor))
    if isinstance(op, O.Contrast):
        return np.asarray(ImageEnhance.Contrast(im).enhance(op.factor))
    if isinstance(op, O.Saturation):
        return np.asarray(ImageEnhance.Color(im).enhance(op.factor))
    if isinstance(op, O.Hue):
        return _hue_ref(a, op.shift)
    if isinstance(op, O.Grayscale):
        return np.asarray(im.convert("L").convert("RGB"))
    if isinstance(op, O.Blur):
        return _blur_ref(a, op.ksize, op.sigma)
    if isinstance(op, O.Posterize):
        return np.asarray(ImageOps.posterize(im, op.bits))
    if isinstance(op, O.Solarize):
        return np.asarray(ImageOps.solarize(im, op.threshold))
    return np.asarray(ImageOps.autocontrast(im))


def diffs(images, engine, op):
    d = np.concatenate(
        [np.abs(engine(a, op).astype(int) - apply_ops(a, [op]).numpy().astype(int)).ravel() for a in images]
    )
    return d.mean(), d.max()


# Stated tolerance, kernels against the references (measured on the photo set, 6 crops of
# 48x64, mean / max |diff|): Brightness 0 / 0 (Pillow truncates too); Pillow rounds grey
# levels to integers where the kernels keep float32, so Contrast 0.18-0.25 / 1 (a rounded
# mean), Saturation 0.12-0.13 / 1, Grayscale 0.46 / 1 (rounds, torchvision truncates),
# AutoContrast 0.007 / 1; Hue against colorsys in float64 0.0001 / 1; Blur against a direct
# float64 2-D convolution 0.00002 / 1; Posterize and Solarize exact.
REF_MEAN_TOL, REF_MAX_TOL = 0.6, 1


@pytest.mark.parametrize("op", OPS, ids=repr)
def test_kernels_match_pillow_or_numpy_reference_within_one_level(images, op):
    mean, mx = diffs(images, reference, op)
    assert mean <= REF_MEAN_TOL and mx <= REF_MAX_TOL, (mean, mx)
    if isinstance(op, (O.Posterize, O.Solarize)):
        assert mx == 0


# Stated tolerance, torch engine (CPU tensors) against the kernels: the same float32
# formulas; measured: exact (0 / 0) for every op but Blur (conv2d sums in another order:
# mean 0.00002, max 1).
TORCH_MEAN_TOL, TORCH_MAX_TOL = 0.001, 1


@pytest.mark.parametrize("op", OPS, ids=repr)
def test_torch_engine_matches_the_kernels(images, op):
    def engine(a, op):
        return torch_apply(torch.from_numpy(a).permute(2, 0, 1), [op]).permute(1, 2, 0).numpy()

    mean, mx = diffs(images, engine, op)
    assert mean <= TORCH_MEAN_TOL and mx <= TORCH_MAX_TOL, (mean, mx)


STAGES = {
    "brightness": R.ColorJitter(brightness=0.6),
    "contrast": R.ColorJitter(contrast=0.6),
    "saturation": R.ColorJitter(saturation=0.8),
    "hue": R.ColorJitter(hue=0.5),
    "colorjitter": R.ColorJitter(0.4, 0.4, 0.4, 0.1),
    "grayscale": R.RandomGrayscale(0.5),
    "blur": R.GaussianBlur(9),
    "blur23": R.GaussianBlur(23, (0.1, 5.0)),
    "trivialaugment": R.TrivialAugmentWide(),
}

# Stated tolerance, DALI (CPU-only mode, its arithmetic operators, reductions and
# gaussian_blur) against the kernels on the same input and the same drawn values; measured
# over 4 epochs x 6 images: every colour stage and TrivialAugmentWide exact (mean 0, max 0);
# GaussianBlur mean 0.00001, max 1 (DALI's blur rounds its float sums in another order).
DALI_MEAN_TOL, DALI_MAX_TOL = 0.001, 1


@pytest.mark.parametrize("name", list(STAGES))
def test_dali_photometric_graph_matches_the_kernels(images, name):
    pytest.importorskip("nvidia.dali")
    from hybridload._pipelines import build_photo_pipeline, compile, photo_vectors

    rec = R.make([R.Decode(), R.CenterCrop(40), STAGES[name]])
    plan = compile(rec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = build_photo_pipeline(rec, batch_size=len(images))
    d = []
    for epoch in range(4):
        crops, vectors, want = [], [], []
        for i, a in enumerate(images):
            p = rec.sample_params(1, epoch, i, a.shape[1], a.shape[0])
            x = apply_ops(a, p.ops[:1]).contiguous()
            crops.append(x.numpy())
            vectors.append(photo_vectors(plan, p.ops))
            want.append(apply_ops(x, p.ops[1:]).numpy())
        pipe.feed_input("image", crops)
        for j, input_name in enumerate(plan.photo_inputs()):
            pipe.feed_input(input_name, [v[j] for v in vectors])
        (out,) = pipe.run()
        d += [np.abs(out.at(k).astype(int) - want[k].astype(int)).ravel() for k in range(len(images))]
    d = np.concatenate(d)
    assert d.mean() <= DALI_MEAN_TOL and d.max() <= DALI_MAX_TOL, (d.mean(), d.max())


def test_a_run_of_colour_ops_equals_the_ops_one_by_one(images):
    ops = [
        O.Brightness(1.2),
        O.Contrast(0.7),
        O.Saturation(1.3),
        O.Hue(0.2),
        O.Grayscale(False),
        O.Blur(3, 0.8),
        O.Posterize(5),
        O.Solarize(200.0),
        O.AutoContrast(),
        O.Grayscale(True),
    ]
    for a in images:
        one_by_one = a
        for op in ops:
            one_by_one = apply_ops(one_by_one, [op]).numpy()
        assert np.array_equal(apply_ops(a, ops).numpy(), one_by_one)


def test_gaussian_kernel_is_torchvisions_normalized_sampled_gaussian():
    w = gaussian_kernel(5, 1.0)
    x = np.arange(-2, 3)
    assert np.allclose(w, np.exp(-0.5 * x**2) / np.exp(-0.5 * x**2).sum(), atol=1e-7)
