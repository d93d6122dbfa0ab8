"""RandomErasing at delivery: the same pixels as the box-by-box reference (host noise copied
per box, the fill copied from a host tensor), now with fill_ and one batched noise copy —
on every layout and dtype. (On CUDA the noise goes through pinned memory with a
non-blocking copy; ``tests/gpu/test_cuda_device.py`` counts the host waits on a GPU.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hybridload._kernels.erase import erase_batch, erase_boxes
from hybridload.recipe import RandomErasing


def reference(images, stage, layout, seed, epoch, indices):
    chw = images.permute(0, 3, 1, 2) if layout == "HWC" else images
    for k, item in enumerate(erase_boxes(stage, tuple(chw.shape[-2:]), seed, epoch, indices)):
        if item is None:
            continue
        (top, left, h, w), noise = item
        region = chw[k, :, top : top + h, left : left + w]
        fill = (
            torch.from_numpy(noise)
            if noise is not None
            else torch.tensor(stage.value, dtype=images.dtype).view(3, 1, 1).expand_as(region)
        )
        region.copy_(fill)
    return images


@pytest.mark.parametrize("value", ["random", 0.0, (0.5, -1.0, 2.0)])
@pytest.mark.parametrize("layout", ["CHW", "HWC"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_erasing_writes_the_reference_pixels(value, layout, dtype):
    stage = RandomErasing(p=0.7, value=value)
    shape = (12, 3, 20, 24) if layout == "CHW" else (12, 20, 24, 3)
    base = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    indices = np.arange(100, 112)
    got = erase_batch(base.clone(), stage, layout, 5, 2, indices)
    want = reference(base.clone(), stage, layout, 5, 2, indices)
    assert torch.equal(got, want)
    assert not torch.equal(got, base)  # something was erased


def test_no_box_in_the_batch_leaves_it_untouched():
    stage = RandomErasing(p=0.0, value="random")
    base = torch.randn(4, 3, 8, 8)
    assert torch.equal(erase_batch(base.clone(), stage, "CHW", 0, 0, np.arange(4)), base)
