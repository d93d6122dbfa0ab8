"""The local lane (no Ray): threads vs worker processes vs torch's DataLoader, side by side.

    python benchmarks/bench_local_lanes.py --images 256 --workers 1,2 --rounds 3

Each round runs every contestant once over the same photo set (interleaved, so a burst of
other load hits all of them); reported: median images/s per contestant, ratios to torch's
DataLoader (same worker count), and the first-batch latency of
``HybridLoader(..., policy=LoaderPolicy())``. Two pipelines (``--pipelines``), each loader
delivering the same kind of batch as its torch contestant:

* ``uint8``: Pillow open, RandomResizedCrop's box, bilinear resize, flip, uint8 CHW tensor;
  against ``imagenet_train(size)``;
* ``normalized``: the same, then what torchvision's reference recipe adds in the workers
  (``PILToTensor``, ``ToDtype(float32, scale=True)``, ``Normalize`` with ImageNet's mean and
  std): float32 batches; against ``imagenet_train(size, normalize=True)``, which normalizes
  on the loader's device (here the CPU, in the consumer's thread).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from _data import photo_source
from hybridload import HybridLoader, LoaderPolicy, recipe


class PillowDataset(torch.utils.data.Dataset):
    """The Pillow pipeline a torch user writes (torchvision's RandomResizedCrop + flip,
    spelled out so torchvision is not needed): uint8 CHW."""

    def __init__(self, src, size: int):
        self.src, self.size = src, size

    def __len__(self):
        return len(self.src)

    def __getitem__(self, i):
        from PIL import Image
        ref = self.src.ref(i)
        with Image.open(ref.location) as im:
            im = im.convert("RGB")
            w, h = im.size
            area = w * h * random.uniform(0.08, 1.0)
            ratio = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
            cw, ch = min(w, round(math.sqrt(area * ratio))), min(h, round(math.sqrt(area / ratio)))
            x, y = random.randint(0, w - cw), random.randint(0, h - ch)
            out = im.resize((self.size, self.size), Image.BILINEAR, box=(x, y, x + cw, y + ch))
            if random.random() < 0.5:
                out = out.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.asarray(out).copy()).permute(2, 0, 1), int(ref.label)


IMAGENET_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
IMAGENET_STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class TorchvisionRecipeDataset(PillowDataset):
    """:class:`PillowDataset`, then ToDtype(float32, scale=True) and Normalize, spelled out as
    torchvision's reference training recipe runs them in each worker."""

    def __getitem__(self, i):
        img, label = super().__getitem__(i)
        return img.to(torch.float32).div_(255).sub_(IMAGENET_MEAN).div_(IMAGENET_STD), label


PIPELINES = {"uint8": (PillowDataset, False), "normalized": (TorchvisionRecipeDataset, True)}


def rate(batches) -> float:
    t0, n = time.perf_counter(), 0
    for b in batches:
        n += len(b[1])
    return n / (time.perf_counter() - t0)


def first_batch_s(src, rec, bs) -> float:
    t0 = time.perf_counter()
    with HybridLoader(src, rec, bs, policy=LoaderPolicy(), device="cpu") as ld:
        next(iter(ld))
        return time.perf_counter() - t0


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="data")
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pipelines", default="uint8,normalized", help=f"any of {', '.join(PIPELINES)}")
    args = ap.parse_args(argv)
    pipelines = args.pipelines.split(",")
    unknown = sorted(set(pipelines) - set(PIPELINES))
    if unknown:
        ap.error(f"--pipelines: unknown {', '.join(unknown)}; write any of {', '.join(PIPELINES)}")
    _folder, src = photo_source(Path(args.data), args.images)
    out = {"first_batch_s_default": first_batch_s(src, recipe.imagenet_train(args.size), args.batch_size)}
    for w in [int(x) for x in args.workers.split(",")]:
        for pipe in pipelines:
            key = f"workers={w}" if pipe == "uint8" else f"workers={w},{pipe}"
            out[key] = compare(src, args, w, *PIPELINES[pipe])
    return out


def compare(src, args, w: int, dataset_cls, normalize: bool) -> dict:
    """One pipeline at ``w`` workers: threads, processes and torch's DataLoader, interleaved."""
    rec = recipe.imagenet_train(args.size, normalize=normalize)
    loaders = {k: HybridLoader(src, rec, args.batch_size, policy=LoaderPolicy(threads=w, local_workers=k),
                               device="cpu") for k in ("threads", "processes")}
    dl = torch.utils.data.DataLoader(dataset_cls(src, args.size), batch_size=args.batch_size, shuffle=True,
                                     num_workers=w, persistent_workers=True)
    runs = {k: [] for k in ("threads", "processes", "torch")}
    try:
        for _ in range(1 + args.rounds):  # the first round warms every contestant up, not counted
            for k, ld in loaders.items():
                runs[k].append(rate(ld))
            runs["torch"].append(rate(dl))
    finally:
        for ld in loaders.values():
            ld.close()
    med = {k: statistics.median(v[1:]) for k, v in runs.items()}
    return {**{f"{k}_images_per_s": round(v) for k, v in med.items()},
            "threads_vs_torch": round(med["threads"] / med["torch"], 2),
            "processes_vs_torch": round(med["processes"] / med["torch"], 2),
            "processes_vs_threads": round(med["processes"] / med["threads"], 2)}


if __name__ == "__main__":
    np.set_printoptions(precision=2)
    print(json.dumps(main(), indent=1))  # a script's report: stdout is its output
