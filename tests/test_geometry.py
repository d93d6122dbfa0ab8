"""Each typed op's kernel against a straightforward reference (numpy or Pillow)."""

import typing

import numpy as np
import pytest
import torch
from PIL import Image

from hybridload.recipe import _ops as ops
from hybridload._kernels.geometry import OP_FUNCTIONS, apply_ops, crop, flip, resize

# the same tolerance as test_kernels.py states against Pillow's BILINEAR resize
MAX_ABS = 1
MAX_MEAN = 0.25


def image(h=37, w=53, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)


def reference_crop(arr: np.ndarray, x: int, y: int, w: int, h: int) -> np.ndarray:
    """Pad generously with zeros, then slice: parts outside the image read as zeros."""
    pad = max(arr.shape) + abs(x) + abs(y) + w + h
    big = np.zeros((arr.shape[0] + 2 * pad, arr.shape[1] + 2 * pad, 3), np.uint8)
    big[pad : pad + arr.shape[0], pad : pad + arr.shape[1]] = arr
    return big[pad + y : pad + y + h, pad + x : pad + x + w]


@pytest.mark.parametrize(
    "box",
    [
        (0, 0, 53, 37),
        (5, 7, 20, 10),  # inside
        (-4, 3, 20, 10),
        (40, 30, 20, 10),  # partly outside, left / bottom-right
        (-10, -10, 80, 60),  # larger than the image on every side
        (100, 100, 8, 8),
        (-30, 0, 10, 5),  # entirely outside
    ],
)
def test_crop_matches_zero_padded_slice(box):
    arr = image()
    got = crop(torch.from_numpy(arr), ops.Crop(*box))
    assert got.dtype == torch.uint8 and tuple(got.shape) == (box[3], box[2], 3)
    np.testing.assert_array_equal(got.numpy(), reference_crop(arr, *box))


def test_flip_mirrors_left_right():
    arr = image()
    np.testing.assert_array_equal(flip(torch.from_numpy(arr), ops.Flip()).numpy(), arr[:, ::-1])


@pytest.mark.parametrize("hw", [(37, 53), (20, 30), (64, 48), (7, 90)])
def test_resize_matches_pillow_bilinear_within_stated_tolerance(hw):
    yy, xx = np.mgrid[0:120, 0:160]
    smooth = np.stack([(xx * 1.5) % 256, (yy * 2.0) % 256, (xx + yy) % 256], axis=2).astype(np.uint8)
    arr = np.clip(smooth.astype(np.int16) + image(120, 160, 1) // 16, 0, 255).astype(np.uint8)
    got = resize(torch.from_numpy(arr), ops.Resize(*hw)).numpy().astype(np.int16)
    ref = np.asarray(Image.fromarray(arr).resize((hw[1], hw[0]), Image.BILINEAR)).astype(np.int16)
    assert got.shape == ref.shape == (hw[0], hw[1], 3)
    diff = np.abs(got - ref)
    assert diff.max() <= MAX_ABS and diff.mean() < MAX_MEAN, (diff.max(), diff.mean())


def crop_views():
    """A whole image, a crop (a strided view, as the window decode's crop is) and upscales."""
    big = torch.from_numpy(image(340, 330, 2))
    return [
        (big, (224, 224)),
        (big[10:330, 12:312], (224, 224)),
        (big[3:40, 5:29], (224, 224)),
        (big[0:300, 7:8], (60, 41)),
    ]


@pytest.mark.parametrize("k", range(4))
def test_resize_returns_a_contiguous_hwc_image_with_no_planar_repack(k):
    # torch writes its channels-last result straight out only when the NCHW view's every
    # stride, the batch dimension's too, is in channels-last order; otherwise it repacks into a
    # planar tensor, which comes back here as a non-contiguous permuted view
    img, hw = crop_views()[k]
    got = resize(img, ops.Resize(*hw))
    assert tuple(got.shape) == (*hw, 3)
    assert got.is_contiguous()


@pytest.mark.parametrize("k", range(4))
def test_resize_pixels_equal_torchs_planar_route(k):
    img, hw = crop_views()[k]
    planar = torch.nn.functional.interpolate(
        img.permute(2, 0, 1).contiguous().unsqueeze(0), size=hw, mode="bilinear", antialias=True, align_corners=False
    )[0].permute(1, 2, 0)
    assert torch.equal(resize(img, ops.Resize(*hw)), planar)


def test_resize_kept_gives_resizes_pixels_in_one_kept_array_per_thread_and_size():
    """The batch job's resize: numpy crop views of a decoded array into the thread's kept array,
    its torch view made once (the same array each call of a size: read before the next call),
    a fresh one above the pooled size, and never another thread's."""
    import threading

    from hybridload._kernels.geometry import resize_kept
    from hybridload._kernels.scratch import MAX_POOLED_PIXELS

    arr = image(61, 83, seed=3)
    want = resize(torch.from_numpy(arr)[4:50, 7:70], ops.Resize(24, 32)).numpy()
    first = resize_kept(arr[4:50, 7:70], ops.Resize(24, 32))
    assert np.array_equal(first, want)
    again = resize_kept(arr[1:40, 2:30], ops.Resize(24, 32))
    assert again is first and np.array_equal(
        again, resize(torch.from_numpy(arr)[1:40, 2:30], ops.Resize(24, 32)).numpy()
    )
    assert resize_kept(arr[:24, :32], ops.Resize(24, 32)).base is arr  # already the size: the view itself
    other: list[np.ndarray] = []
    t = threading.Thread(target=lambda: other.append(resize_kept(arr[4:50, 7:70], ops.Resize(24, 32))))
    t.start()
    t.join(timeout=60)
    assert other and other[0] is not first and np.array_equal(other[0], want)
    side = int(MAX_POOLED_PIXELS**0.5) + 1
    big = resize_kept(arr, ops.Resize(side, side))
    assert resize_kept(arr, ops.Resize(side, side)) is not big


def test_resize_to_the_same_size_returns_the_image_unchanged():
    t = torch.from_numpy(image())
    assert resize(t, ops.Resize(37, 53)) is t


def test_every_op_type_has_a_kernel():
    from hybridload.recipe._custom import CustomOp

    assert set(OP_FUNCTIONS) == set(typing.get_args(ops.Op)) | {CustomOp}


def test_apply_ops_runs_ops_in_order_and_names_the_failing_stage():
    arr = image()
    got = apply_ops(arr, (ops.Crop(2, 3, 30, 20), ops.Flip(), ops.Crop(0, 0, 10, 10)))
    np.testing.assert_array_equal(got.numpy(), arr[3:23, 2:32][:, ::-1][:10, :10])

    class Unknown:
        pass

    with pytest.raises(ValueError, match="unknown operation") as info:
        apply_ops(arr, (ops.Flip(), Unknown()), ("HorizontalFlip", "Mystery"))
    assert info.value.stage == "Mystery"
