"""The torch engine's table (`OP_FUNCTIONS`, `UNSUPPORTED`), `compile` and its geometric ops on CHW
uint8 tensors. CUDA has no uint8 antialiased resize, so it resizes in float32 with the CPU
kernel's weights, within one grey level of it (tests/test_gpu_path.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.nn.functional as F

from hybridload.recipe._custom import CustomOp
from hybridload.recipe._ops import PHOTOMETRIC, Crop, Flip, Op, Resize

from hybridload._torchops.photo import PHOTO_FUNCTIONS

if TYPE_CHECKING:
    from hybridload.recipe import Recipe


def as_op(op) -> Op:
    """A typed op from a typed op or a legacy tuple ("crop", x, y, w, h) / ("resize", h, w) / ("flip",)."""
    if isinstance(op, (Crop, Resize, Flip) + PHOTOMETRIC):
        return op
    kind = op[0]
    if kind == "crop":
        return Crop(*(int(v) for v in op[1:5]))
    if kind == "resize":
        return Resize(int(op[1]), int(op[2]))
    if kind == "flip":
        return Flip()
    raise ValueError(f"unknown operation {op!r}")


_as_op = as_op  # an alias of as_op (nothing in the tree reads it)


def crop(img: torch.Tensor, op: Crop) -> torch.Tensor:
    """Integer crop of a CHW tensor; parts outside the image read as zeros."""
    H, W = img.shape[-2], img.shape[-1]
    x, y, w, h = op.x, op.y, op.w, op.h
    if x >= 0 and y >= 0 and x + w <= W and y + h <= H:
        return img[:, y : y + h, x : x + w]
    out = img.new_zeros((img.shape[0], h, w))
    sx0, sy0, sx1, sy1 = max(x, 0), max(y, 0), min(x + w, W), min(y + h, H)
    if sx1 > sx0 and sy1 > sy0:
        out[:, sy0 - y : sy1 - y, sx0 - x : sx1 - x] = img[:, sy0:sy1, sx0:sx1]
    return out


def resize_many(imgs: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Antialiased bilinear resize of an NCHW uint8 batch (float32 math, rounded to nearest):
    one launch for the batch, each image as `resize` makes it alone."""
    if imgs.shape[-2] == h and imgs.shape[-1] == w:
        return imgs
    out = F.interpolate(imgs.float(), size=(h, w), mode="bilinear", antialias=True, align_corners=False)
    return out.round_().clamp_(0, 255).to(torch.uint8)


def resize(img: torch.Tensor, op: Resize) -> torch.Tensor:
    """Antialiased bilinear resize of a CHW uint8 tensor (float32 math, rounded to nearest)."""
    return resize_many(img.unsqueeze(0), op.h, op.w)[0]


def flip(img: torch.Tensor, op: Flip) -> torch.Tensor:
    """Left-right mirror of a CHW tensor."""
    return img.flip(-1)


#: The torch engine's function of each op type (the colour ones from `photo`).
OP_FUNCTIONS: dict[type, Callable[[torch.Tensor, Any], torch.Tensor]] = {
    Crop: crop,
    Resize: resize,
    Flip: flip,
    **PHOTO_FUNCTIONS,
}
#: Op types the torch engine does not run, and why (their batches go to the CPU lanes).
UNSUPPORTED: dict[type, str] = {
    CustomOp: "a user's Python function runs in the CPU lanes only (a recipe holding one is not gpu_capable)"
}


def apply_ops(img: torch.Tensor, ops) -> torch.Tensor:
    """Apply a sample's ops in order to a CHW uint8 tensor."""
    for op in ops:
        op = as_op(op)
        img = OP_FUNCTIONS[type(op)](img, op)
    return img


def compile(rec: Recipe) -> Callable[[list[torch.Tensor], Any], list[torch.Tensor]]:
    """`apply_ops_batch` as ``rec``'s pipeline once every op its stages emit has a function here;
    ValueError naming the stage, the op and why otherwise."""
    if (why := rec.cannot_run("torch", OP_FUNCTIONS, UNSUPPORTED)) is not None:
        raise ValueError(why)
    return apply_ops_batch


def apply_ops_batch(images: list[torch.Tensor], ops_lists) -> list[torch.Tensor]:
    """`apply_ops` for a batch, same-shape resizes in one launch (an eval recipe's); samples whose op
    types differ run one by one."""
    ops_lists = [[as_op(op) for op in ops] for ops in ops_lists]
    kinds = {tuple(type(op) for op in ops) for ops in ops_lists}
    if len(kinds) != 1:
        return [apply_ops(img, ops) for img, ops in zip(images, ops_lists)]
    images = list(images)
    for k, kind in enumerate(next(iter(kinds))):
        if kind is not Resize:
            images = [OP_FUNCTIONS[kind](img, ops[k]) for img, ops in zip(images, ops_lists)]
            continue
        groups: dict[tuple, list[int]] = {}
        for j, (img, ops) in enumerate(zip(images, ops_lists)):
            groups.setdefault((tuple(img.shape), ops[k].h, ops[k].w), []).append(j)
        for (_shape, h, w), members in groups.items():
            if len(members) == 1:
                images[members[0]] = resize(images[members[0]], Resize(h, w))
                continue
            out = resize_many(torch.stack([images[j] for j in members]), h, w)
            for j, img in zip(members, out.unbind(0)):
                images[j] = img
    return images


def stack(images: list[torch.Tensor], layout: str = "CHW") -> torch.Tensor:
    """``[B, 3, H, W]`` uint8 (layout "CHW") or ``[B, H, W, 3]`` (layout "HWC")."""
    batch = torch.stack(images)
    return batch if layout == "CHW" else batch.permute(0, 2, 3, 1).contiguous()
