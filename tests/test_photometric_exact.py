"""The photometric kernels (planar float32, scratch arrays, clamps only where needed) give
the bits of the plain float32 formulas of _kernels/photometric.py's text, written below the
straightforward way on HWC arrays (op by op, clip and floor after each)."""

import threading

import numpy as np
import pytest
import torch

from hybridload.recipe import _ops as O
from hybridload._kernels import grey as G
from hybridload._kernels import photometric as P
from hybridload._kernels import scratch as S

F32 = np.float32
W = (F32(0.299), F32(0.587), F32(0.114))


def _grey(x):
    return x[..., 0] * W[0] + x[..., 1] * W[1] + x[..., 2] * W[2]


def _mean_grey(x):
    """(0.299 S_R + 0.587 S_G + 0.114 S_B) / n in float64 from exact channel sums, as float32."""
    s = x.reshape(-1, 3).astype(np.float64).sum(axis=0)
    w = [float(v) for v in W]
    return F32((w[0] * s[0] + w[1] * s[1] + w[2] * s[2]) / (x.shape[0] * x.shape[1]))


def _trunc(y):
    return np.floor(np.clip(y, 0, 255))


def _blend(x, f, other):
    return _trunc(x * F32(f) + other * (F32(1.0) - F32(f)))


def _hue(x, shift):
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    maxc, minc = np.maximum(np.maximum(r, g), b), np.minimum(np.minimum(r, g), b)
    cr = maxc - minc
    is_r = maxc == r
    is_g = (maxc == g) & ~is_r
    is_b = ~(is_r | is_g)
    num = np.where(is_r, g - b, np.where(is_g, b - r, r - g))
    h6 = num / np.where(cr == 0, F32(1), cr) + (F32(2) * is_g + F32(4) * is_b) + F32(6 * shift)
    out = np.empty(x.shape, np.float32)
    for c, n in enumerate((5.0, 3.0, 1.0)):
        k = h6 + F32(n)
        k -= F32(6) * np.floor(k * F32(1 / 6))
        out[..., c] = maxc - cr * np.clip(np.minimum(k, F32(4) - k), 0, 1)
    return _trunc(out * F32(255.999 / 255))


def _blur(x, op):
    w, p = P.gaussian_kernel(op.ksize, op.sigma), op.ksize // 2
    for axis in (0, 1):
        pad = [(0, 0)] * 3
        pad[axis] = (p, p)
        xp, n = np.pad(x, pad, mode="reflect"), x.shape[axis]
        tap = (lambda i: xp[i : i + n]) if axis == 0 else (lambda i: xp[:, i : i + n])
        x = tap(p) * w[p]
        for i in range(p):
            x += (tap(i) + tap(op.ksize - 1 - i)) * w[i]
    return np.clip(np.rint(x), 0, 255)


def _autocontrast(x):
    mn, mx = x.min(axis=(0, 1)), x.max(axis=(0, 1))
    flat = mx == mn
    scale = F32(255) / np.where(flat, F32(1), mx - mn)
    scale[flat], mn[flat] = 1, 0
    return _trunc((x - mn) * scale)


def reference(a: np.ndarray, ops) -> np.ndarray:
    x = a.astype(np.float32)
    for op in ops:
        if isinstance(op, O.Brightness):
            x = _trunc(x * F32(op.factor))
        elif isinstance(op, O.Contrast):
            x = _blend(x, op.factor, _mean_grey(x))
        elif isinstance(op, O.Saturation):
            x = _blend(x, op.factor, _grey(x)[..., None])
        elif isinstance(op, O.Hue):
            x = _hue(x, op.shift)
        elif isinstance(op, O.Grayscale):
            x = np.repeat(np.floor(_grey(x))[..., None], 3, axis=2) if op.apply else x
        elif isinstance(op, O.Blur):
            x = _blur(x, op)
        elif isinstance(op, O.Posterize):
            q = F32(2 ** (8 - op.bits))
            x = np.floor(x / q) * q
        elif isinstance(op, O.Solarize):
            x = np.where(x >= op.threshold, F32(255) - x, x)
        else:
            x = _autocontrast(x)
    return x.astype(np.uint8)


def _image(rng, photo):
    kind = rng.integers(0, 5)
    h, w = (int(v) for v in rng.integers(12, 70, 2))
    if kind == 0:
        return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)  # noise: every hue sector, no runs
    if kind == 1:
        return np.full((h, w, 3), rng.integers(0, 256, 3), np.uint8)  # flat: grey, cr == 0
    if kind == 2:
        return rng.choice(np.array([0, 1, 254, 255], np.uint8), (h, w, 3))  # the ends of the range
    y, x = (int(v) for v in rng.integers(0, 40, 2))
    view = photo[y : y + h, x : x + w]
    return view if kind == 3 else np.ascontiguousarray(view)  # a strided view, as a crop gives


def _op(rng):
    f = float(rng.choice([rng.uniform(0, 2), rng.uniform(0, 6), 0.0, 1.0 + rng.uniform(-1e-3, 1e-3)]))
    return [
        O.Brightness(f),
        O.Contrast(f),
        O.Saturation(f),
        O.Hue(float(rng.uniform(-0.5, 0.5))),
        O.Hue(float(rng.choice([-0.5, 0.5, 1 / 6, -1 / 3]))),
        O.Grayscale(bool(rng.integers(2))),
        O.Blur(int(rng.choice([1, 3, 5, 9])), float(rng.uniform(0.1, 3))),
        O.Posterize(int(rng.integers(1, 9))),
        O.Solarize(float(rng.integers(0, 256))),
        O.AutoContrast(),
    ][rng.integers(0, 10)]


@pytest.fixture(scope="module")
def photo():
    g = np.random.default_rng(7)
    yy, xx = np.mgrid[0:120, 0:120]
    smooth = np.stack([xx * 2, yy * 2, (xx + yy)], -1) % 256  # runs of one sector, as in photos
    return np.clip(smooth + g.integers(-3, 4, smooth.shape), 0, 255).astype(np.uint8)


def test_kernels_give_the_plain_float32_formulas_bits_on_every_kind_of_image_and_run(photo):
    rng = np.random.default_rng(2024)
    for case in range(400):
        a = _image(rng, photo)
        ops = [_op(rng) for _ in range(rng.integers(1, 5))]
        got = P.apply_photometric(torch.from_numpy(a), ops).numpy()
        assert np.array_equal(got, reference(a, ops)), (case, a.shape, ops)


@pytest.mark.parametrize("hw", [(513, 512), (224, 224), (7, 5), (4100, 4100)])  # last: float64 column sums
def test_mean_grey_from_channel_sums_is_exact_for_planar_and_hwc_memory_and_near_the_grey_mean(hw):
    a = np.random.default_rng(1).integers(0, 256, (*hw, 3)).astype(np.float32)
    want = _mean_grey(a)
    assert G.mean_grey(np.ascontiguousarray(a.transpose(2, 0, 1))) == want  # planar
    assert G.mean_grey(a.transpose(2, 0, 1)) == want  # a view of HWC memory
    assert abs(float(want) - G.grey(a.transpose(2, 0, 1)).mean(dtype=np.float64)) < 1e-3  # the grey levels' mean


def test_an_image_past_the_scratch_pool_limit_gets_the_same_bits(photo):
    a = np.ascontiguousarray(np.tile(photo, (9, 10, 1)))  # 1080 x 1200 > MAX_POOLED_PIXELS
    assert a.shape[0] * a.shape[1] > S.MAX_POOLED_PIXELS
    ops = [O.Brightness(1.2), O.Contrast(0.7), O.Saturation(1.4), O.Hue(0.1)]
    assert np.array_equal(P.apply_photometric(torch.from_numpy(a), ops).numpy(), reference(a, ops))


def test_scratch_arrays_are_reused_by_a_thread_dropped_for_a_new_size_and_never_shared():
    first = S.scratch((4, 5), (4, 5), np.float32, 2)
    again = S.scratch((4, 5), (4, 5), np.float32, 3)
    assert again[0] is first[0] and again[1] is first[1] and len(again) == 3
    assert S.scratch((6, 5), (6, 5), np.float32)[0] is not first[0]
    assert S.scratch((4, 5), (4, 5), np.float32)[0] is not first[0]  # the new size dropped the old arrays
    other = []
    t = threading.Thread(target=lambda: other.append(S.scratch((4, 5), (4, 5), np.float32)[0]))
    t.start()
    t.join(timeout=30)
    mine = S.scratch((4, 5), (4, 5), np.float32)[0]
    assert other and other[0] is not mine
