"""The loaders users run today, each with the per-sample pipeline its users write: Pillow's
decode, the sample's RandomResizedCrop box (hybridload's keyed draw, torchvision's
``get_params``), Pillow's antialiased BILINEAR resize of that box (what torchvision's
RandomResizedCrop does to a PIL image), the flip, to a CHW uint8 tensor; batches made by
torch's ``default_collate``. Three loaders run it with ``threads`` workers each: torch's
DataLoader (worker processes), torchdata.nodes (``ParallelMapper``, its default threads) and
SPDL's pipeline (``PipelineBuilder``, threads). SPDL's own image decoder (``spdl.io``, FFmpeg)
needs FFmpeg's shared libraries, which this box lacks, so SPDL runs the Pillow function too.
"""

from __future__ import annotations

import io
import logging

import numpy as np
import torch
import torch.utils.data as tud
from PIL import Image

from _contestants import Batches, SampledLoader, epoch_keys, torch_loader
from hybridload.recipe._ops import Flip

logging.getLogger("spdl").setLevel(logging.WARNING)  # its per-stage INFO reports would fill the run's log


IMAGENET_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
IMAGENET_STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class PilSample:
    """``(epoch, i)`` -> (CHW uint8 tensor, label): sample ``i`` through Pillow (seed 0).
    ``normalize``: then ToDtype(float32, scale=True) and Normalize with ImageNet's mean and std,
    spelled out as torchvision's reference training recipe runs them in each worker."""

    def __init__(self, source, rec, normalize: bool = False):
        self.source, self.rec, self.normalize = source, rec, normalize

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, key):
        return self(key)

    def __call__(self, key):
        epoch, i = key
        ref = self.source.ref(i)
        data, label = self.source.read(ref)
        with Image.open(io.BytesIO(data)) as im:
            im = im.convert("RGB")
        ops = self.rec.sample_params(0, epoch, i, *im.size).ops
        c, out = ops[0], ops[1]
        im = im.resize((out.w, out.h), Image.BILINEAR, box=(c.x, c.y, c.x + c.w, c.y + c.h))
        if any(type(op) is Flip for op in ops[2:]):
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        img = torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1).contiguous()
        if self.normalize:
            img = img.to(torch.float32).div_(255).sub_(IMAGENET_MEAN).div_(IMAGENET_STD)
        return img, label


class _Keyed(Batches):
    """``batches(epoch)`` by a peer over one epoch's `epoch_keys`."""

    def __init__(self, name: str, source, rec, batch_size: int, threads: int, normalize: bool = False):
        self.name, self.threads, self.batch_size = name, threads, batch_size
        self.sample, self.n = PilSample(source, rec, normalize), len(source)


def torch_pil(name: str, source, rec, batch_size: int, threads: int, normalize: bool = False) -> SampledLoader:
    """torch's DataLoader, ``threads`` persistent worker processes, over `PilSample`."""
    return SampledLoader(name, PilSample(source, rec, normalize), threads, torch_loader(batch_size, threads))


class TorchdataNodes(_Keyed):
    """torchdata.nodes: IterableWrapper(keys) -> ParallelMapper(`PilSample`, threads) -> Batcher -> collate."""

    def batches(self, epoch: int):
        import torchdata.nodes as tn

        node = tn.ParallelMapper(
            tn.IterableWrapper(epoch_keys(self.n, epoch)),
            map_fn=self.sample,
            num_workers=self.threads,
            in_order=True,
            method="thread",
        )
        node = tn.Mapper(tn.Batcher(node, batch_size=self.batch_size, drop_last=False), tud.default_collate)
        return tn.Loader(node)


class Spdl(_Keyed):
    """SPDL: PipelineBuilder: source(keys) -> pipe(`PilSample`, concurrency=threads) -> aggregate -> collate."""

    def batches(self, epoch: int):
        from spdl.pipeline import PipelineBuilder

        pipe = (
            PipelineBuilder()
            .add_source(epoch_keys(self.n, epoch))
            .pipe(self.sample, concurrency=self.threads, output_order="input")
            .aggregate(self.batch_size)
            .pipe(tud.default_collate)
            .add_sink(3)
            .build(num_threads=self.threads)
        )
        with pipe.auto_stop():
            yield from pipe.get_iterator(timeout=300)
