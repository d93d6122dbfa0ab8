"""The local lane (no Ray): threads vs worker processes vs torch's DataLoader, side by side.

    python benchmarks/bench_local_lanes.py --n 256 --workers-list 1,2 --rounds 3

For each worker count and pipeline, the three contestants run in interleaved rounds over the
same photo set (``_harness``: a burst of other load hits all of them); reported per contestant:
median images/s with CPU use and contention, and the ratios to torch's DataLoader with the same
worker count; also the first-batch latency of ``HybridLoader(..., policy=LoaderPolicy())``. Two
pipelines (``--pipelines``), each loader delivering the same kind of batch as its torch
contestant:

* ``uint8``: Pillow open, RandomResizedCrop's box, bilinear resize, flip, uint8 CHW tensor;
  against ``imagenet_train(size)``;
* ``normalized``: the same, then what torchvision's reference recipe adds in the workers
  (``PILToTensor``, ``ToDtype(float32, scale=True)``, ``Normalize`` with ImageNet's mean and
  std): float32 batches; against ``imagenet_train(size, normalize=True)``, which normalizes
  on the loader's device (here the CPU, in the consumer's thread).
"""

from __future__ import annotations

import math
import random
import time

import numpy as np
import torch

from _contestants import Batches, Loader
from _data import parser, photo_source
from _harness import environment, environment_line, emit, ratio, ratio_table, results_table, set_up_and_run
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
KINDS = ("threads", "processes")


class TorchLoader(Batches):
    """torch's DataLoader over ``dataset`` with persistent workers (a run: one epoch)."""

    def __init__(self, name: str, dataset, batch_size: int, workers: int):
        self.name, self.threads = name, workers
        self.loader = torch.utils.data.DataLoader(
            dataset, batch_size=batch_size, shuffle=True, num_workers=workers, persistent_workers=workers > 0
        )

    def batches(self, epoch: int):
        return self.loader

    def close(self) -> None:
        del self.loader  # persistent workers end with their iterator


def first_batch_s(src, rec, bs) -> float:
    t0 = time.perf_counter()
    with HybridLoader(src, rec, bs, policy=LoaderPolicy(), device="cpu") as ld:
        next(iter(ld))
        return time.perf_counter() - t0


def compare(src, args, w: int, pipeline: str) -> tuple[dict, dict]:
    """One pipeline at ``w`` workers: threads, processes and torch's DataLoader, interleaved.
    Returns (summaries by contestant, ratios)."""
    dataset_cls, normalize = PIPELINES[pipeline]
    rec = recipe.imagenet_train(args.size, normalize=normalize)
    contestants = [
        Loader(k, src, rec, args.batch_size, LoaderPolicy(threads=w, local_workers=k), threads=w) for k in KINDS
    ]
    contestants.append(TorchLoader("torch", dataset_cls(src, args.size), args.batch_size, w))
    results = set_up_and_run(contestants, args.rounds, args.warmup_rounds, label=f"[{pipeline}, {w} workers] ")
    ratios = {
        "threads / torch": ratio(results, "threads", "torch"),
        "processes / torch": ratio(results, "processes", "torch"),
        "processes / threads": ratio(results, "processes", "threads"),
    }
    return results, ratios


def main(argv=None) -> dict:
    ap = parser(
        __doc__,
        quick={"n": 64, "rounds": 1, "workers_list": "1", "pipelines": "uint8"},
        n=256,
        rounds=3,
        batch_size=32,
        size=224,
    )
    ap.add_argument("--workers-list", default="1,2", help="the worker counts to compare, comma-separated")
    ap.add_argument("--pipelines", default="uint8,normalized", help=f"any of {', '.join(PIPELINES)}")
    args = ap.parse_args(argv)
    pipelines = args.pipelines.split(",")
    unknown = sorted(set(pipelines) - set(PIPELINES))
    if unknown:
        ap.error(f"--pipelines: unknown {', '.join(unknown)}; write any of {', '.join(PIPELINES)}")
    _folder, src = photo_source(args.root, args.n)
    env = environment()
    doc = {
        "benchmark": "bench_local_lanes",
        "environment": env,
        "first_batch_s_default": first_batch_s(src, recipe.imagenet_train(args.size), args.batch_size),
        "runs": {},
    }
    lines = [
        "# The local lane: threads, worker processes and torch's DataLoader",
        "",
        f"First batch of HybridLoader(..., policy=LoaderPolicy()): {doc['first_batch_s_default']:.2f} s",
        "",
    ]
    for w in [int(x) for x in args.workers_list.split(",")]:
        for pipe in pipelines:
            results, ratios = compare(src, args, w, pipe)
            doc["runs"][f"workers={w},{pipe}"] = {"contestants": results, "ratios": ratios}
            lines += [
                f"## {pipe}, {w} worker(s), batch {args.batch_size}, {args.n} photos",
                "",
                *results_table(results),
                "",
                *ratio_table(ratios),
                "",
            ]
    lines.append(environment_line(env))
    emit(lines, args, dict(doc))
    return doc


if __name__ == "__main__":
    main()
