"""The photometric stages in a DALI graph, fed each sample's values through external_source.

Each photometric stage of a recipe becomes one float32 vector input ``photo<j>`` per sample
(`photo_vectors`, pure, no DALI import):

==================  ===============================================
ColorJitter         [brightness, contrast, saturation, hue shift]
RandomGrayscale     [1.0 if greyscale else 0.0]
GaussianBlur        [sigma]
TrivialAugmentWide  [branch, value]  (branch: `TA_BRANCHES`)
==================  ===============================================

`photo_graph` applies them with DALI's arithmetic operators (float32, the formulas
of ``kernels/photometric.py``: blends, HSV hue, masks), ``fn.reductions`` (means, per-channel
min/max) and ``fn.gaussian_blur``, so the graph stays fixed while every sample gets its
own values. TrivialAugmentWide computes each branch and keeps the drawn one.
"""

from __future__ import annotations

import numpy as np

from hybridload.recipe import ops as O
from hybridload import recipe as R

#: Ops per sample each photometric stage emits.
WIDTH = {"ColorJitter": 4, "RandomGrayscale": 1, "GaussianBlur": 1, "TrivialAugmentWide": 1}
#: TrivialAugmentWide's op types in branch order.
TA_BRANCHES = (O.Brightness, O.Saturation, O.Contrast, O.Posterize, O.Solarize, O.AutoContrast)


def photo_stages(rec: R.Recipe) -> tuple:
    """The recipe's photometric per-sample stages, in order."""
    return tuple(s for s in rec.stages if type(s).__name__ in WIDTH and isinstance(s, R.PER_SAMPLE))


def photo_inputs(rec: R.Recipe) -> tuple[str, ...]:
    return tuple(f"photo{j}" for j in range(len(photo_stages(rec))))


def _ta_value(op: O.Op) -> float:
    if isinstance(op, (O.Brightness, O.Saturation, O.Contrast)):
        return op.factor
    if isinstance(op, O.Posterize):
        return float(op.bits)
    if isinstance(op, O.Solarize):
        return op.threshold
    return 0.0


def _vector(stage: str, group: list) -> list[float]:
    if stage == "ColorJitter":
        b, c, s, h = group
        return [b.factor, c.factor, s.factor, h.shift]
    if stage == "RandomGrayscale":
        return [float(group[0].apply)]
    if stage == "GaussianBlur":
        return [group[0].sigma]
    return [float(TA_BRANCHES.index(type(group[0]))), _ta_value(group[0])]


def photo_vectors(params: R.SampleParams) -> tuple[np.ndarray, ...]:
    """One float32 vector per photometric stage of a sample (see the module's table)."""
    ops = [(op, st) for op, st in zip(params.ops, params.stages) if isinstance(op, O.PHOTOMETRIC)]
    out, k = [], 0
    while k < len(ops):
        stage = ops[k][1]
        n = WIDTH[stage]
        out.append(np.array(_vector(stage, [op for op, _ in ops[k:k + n]]), np.float32))
        k += n
    return tuple(out)


# ------------------------------------------------------------------ the DALI graph
def photo_graph(img, rec: R.Recipe, source, fn, types, dmath):
    """Apply the recipe's photometric stages to ``img`` (uint8 HWC); returns uint8 HWC."""
    stages = photo_stages(rec)
    if not stages:
        return img

    def u8(x):
        return fn.cast(dmath.clamp(dmath.floor(x), 0.0, 255.0), dtype=types.UINT8)

    def trunc(x):
        return dmath.floor(dmath.clamp(x, 0.0, 255.0))

    def grey(x):
        return x[:, :, 0:1] * 0.299 + x[:, :, 1:2] * 0.587 + x[:, :, 2:3] * 0.114

    def blend(x, f, other):
        return trunc(x * f + other * (1.0 - f))

    def contrast(x, f):
        return blend(x, f, fn.reductions.mean(grey(x)))

    def hue(x, shift):
        r, g, b = x[:, :, 0:1], x[:, :, 1:2], x[:, :, 2:3]
        maxc, minc = dmath.max(dmath.max(r, g), b), dmath.min(dmath.min(r, g), b)
        cr = maxc - minc
        is_r, is_g = maxc == r, maxc == g
        not_r = maxc != r
        num = is_r * (g - b) + (is_g & not_r) * (b - r) + ((maxc != g) & not_r) * (r - g)
        off = (is_g & not_r) * 2.0 + ((maxc != g) & not_r) * 4.0
        h6 = num / (cr + (cr == 0.0)) + off + shift * 6.0
        chans = []
        for n in (5.0, 3.0, 1.0):
            k = h6 + n
            k = k - 6.0 * dmath.floor(k * (1 / 6))
            chans.append(maxc - cr * dmath.clamp(dmath.min(k, 4.0 - k), 0.0, 1.0))
        return trunc(fn.cat(*chans, axis=2) * (255.999 / 255))

    def autocontrast(x):
        mn, mx = fn.reductions.min(x, axes=[0, 1]), fn.reductions.max(x, axes=[0, 1])
        flat = mx == mn
        scale = (255.0 / (mx - mn + flat)) * (1.0 - flat) + flat
        return trunc((x - mn * (1.0 - flat)) * scale)

    def trivial(x, v):
        branch, m = v[0], v[1]
        q = dmath.pow(2.0, 8.0 - dmath.clamp(m, 1.0, 8.0))  # finite for every branch's m: 0 * inf is NaN
        outs = (trunc(x * m), blend(x, m, grey(x)), contrast(x, m), dmath.floor(x / q) * q,
                x + (x >= m) * (255.0 - 2.0 * x), autocontrast(x))
        total = None
        for k, y in enumerate(outs):
            part = (branch == float(k)) * y
            total = part if total is None else total + part
        return total

    for j, st in enumerate(stages):
        v = source(f"photo{j}", types.FLOAT, 1)
        if isinstance(st, R.GaussianBlur):
            img = fn.gaussian_blur(img, window_size=st.kernel_size, sigma=v[0])
            continue
        x = fn.cast(img, dtype=types.FLOAT)
        if isinstance(st, R.ColorJitter):
            if st.brightness is not None:
                x = trunc(x * v[0])
            if st.contrast is not None:
                x = contrast(x, v[1])
            if st.saturation is not None:
                x = blend(x, v[2], grey(x))
            if st.hue is not None:
                x = hue(x, v[3])
        elif isinstance(st, R.RandomGrayscale):
            g = dmath.floor(grey(x))
            x = fn.cat(g, g, g, axis=2) * v[0] + x * (1.0 - v[0])
        else:
            x = trivial(x, v)
        img = u8(x)
    return img
