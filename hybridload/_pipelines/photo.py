"""The colour stages in a DALI graph: each reads its vector input ``photo<j>`` and applies its
slots from the op table, so the graph stays fixed while every sample gets its own values.
"""

from __future__ import annotations

from hybridload._pipelines.ops import OP_FUNCTIONS, UINT8_OPS, Dali
from hybridload._pipelines.plan import DaliPlan


def _drawn(d: Dali, x, index, value, slot, stage):
    """Every op type of the slot computed, the drawn one (``index``) kept."""
    total = None
    for k, op in enumerate(slot.types):
        part = (index == float(k)) * OP_FUNCTIONS[op](d, x, value, stage)
        total = part if total is None else total + part
    return total


def photo_graph(img, plan: DaliPlan, source, d: Dali):
    """Apply the plan's colour stages to ``img`` (uint8 HWC); returns uint8 HWC. Ops on float32
    HWC run in float between the uint8 ones (`ops.UINT8_OPS`), rounded back at each stage's end."""
    for j, stage in enumerate(plan.photo):
        v = source(f"photo{j}", d.types.FLOAT, 1)
        x, k = None, 0  # x: the float32 image while one is open
        for slot in stage.slots:
            n = 2 if len(slot.types) > 1 else 1
            if not slot.identity:
                if slot.types[0] in UINT8_OPS:
                    img = img if x is None else d.u8(x)
                    img, x = OP_FUNCTIONS[slot.types[0]](d, img, v[k], stage.stage), None
                else:
                    x = d.fn.cast(img, dtype=d.types.FLOAT) if x is None else x
                    if n == 1:
                        x = OP_FUNCTIONS[slot.types[0]](d, x, v[k], stage.stage)
                    else:
                        x = _drawn(d, x, v[k], v[k + 1], slot, stage.stage)
            k += n
        if x is not None:
            img = d.u8(x)
    return img
