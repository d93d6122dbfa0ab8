"""The photometric stages in a DALI graph, fed each sample's values through external_source.

Each photometric stage of a recipe becomes one float32 vector input ``photo<j>`` per sample
(`photo_vectors`, pure, no DALI import):

==================  ===============================================
ColorJitter         [brightness, contrast, saturation, hue shift]
RandomGrayscale     [1.0 if greyscale else 0.0]
GaussianBlur        [sigma]
TrivialAugmentWide  [branch, value]  (branch: `TA_BRANCHES`)
==================  ===============================================

`photo_graph` applies each stage's ops with the DALI engine's function of each op type
(`ops.OP_FUNCTIONS`), so the graph stays fixed while every sample gets its own values.
TrivialAugmentWide computes each branch and keeps the drawn one.
"""

from __future__ import annotations

import numpy as np

from hybridload.recipe import ops as O
from hybridload import recipe as R

from hybridload.pipelines.ops import OP_FUNCTIONS, Dali

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
        out.append(np.array(_vector(stage, [op for op, _ in ops[k : k + n]]), np.float32))
        k += n
    return tuple(out)


# ------------------------------------------------------------------ the DALI graph
#: ColorJitter's ops in the order of its vector, with the field that turns each on.
JITTER = (("brightness", O.Brightness), ("contrast", O.Contrast), ("saturation", O.Saturation), ("hue", O.Hue))


def _trivial(d: Dali, x, v, stage):
    """Every TrivialAugmentWide branch computed, the drawn one (``v[0]``) kept."""
    total = None
    for k, op in enumerate(TA_BRANCHES):
        part = (v[0] == float(k)) * OP_FUNCTIONS[op](d, x, v[1], stage)
        total = part if total is None else total + part
    return total


def photo_graph(img, rec: R.Recipe, source, fn, types, dmath):
    """Apply the recipe's photometric stages to ``img`` (uint8 HWC) with the DALI engine's op
    functions (`ops.OP_FUNCTIONS`); returns uint8 HWC."""
    d = Dali(fn, types, dmath)
    for j, st in enumerate(photo_stages(rec)):
        v = source(f"photo{j}", types.FLOAT, 1)
        if isinstance(st, R.GaussianBlur):
            img = OP_FUNCTIONS[O.Blur](d, img, v[0], st)
            continue
        x = fn.cast(img, dtype=types.FLOAT)
        if isinstance(st, R.ColorJitter):
            for k, (field, op) in enumerate(JITTER):
                if getattr(st, field) is not None:
                    x = OP_FUNCTIONS[op](d, x, v[k], st)
        elif isinstance(st, R.RandomGrayscale):
            x = OP_FUNCTIONS[O.Grayscale](d, x, v[0], st)
        else:
            x = _trivial(d, x, v, st)
        img = d.u8(x)
    return img
