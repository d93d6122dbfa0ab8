"""The local lane (no Ray): threads vs worker processes vs torch's DataLoader, side by side.

    python benchmarks/bench_local_lanes.py --images 256 --workers 1,2 --rounds 3

Each round runs every contestant once over the same photo set (interleaved, so a burst of
other load hits all of them); reported: median images/s per contestant, ratios to torch's
DataLoader (Pillow: open, RandomResizedCrop's box, resize, flip, to tensor; same
worker count), and the first-batch latency of ``HybridLoader(..., policy=LoaderPolicy())``.
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
    args = ap.parse_args(argv)
    _folder, src = photo_source(Path(args.data), args.images)
    rec = recipe.imagenet_train(args.size)
    out = {"first_batch_s_default": first_batch_s(src, rec, args.batch_size)}
    for w in [int(x) for x in args.workers.split(",")]:
        loaders = {k: HybridLoader(src, rec, args.batch_size, policy=LoaderPolicy(threads=w, local_workers=k),
                                   device="cpu") for k in ("threads", "processes")}
        dl = torch.utils.data.DataLoader(PillowDataset(src, args.size), batch_size=args.batch_size, shuffle=True,
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
        out[f"workers={w}"] = {**{f"{k}_images_per_s": round(v) for k, v in med.items()},
                               "threads_vs_torch": round(med["threads"] / med["torch"], 2),
                               "processes_vs_torch": round(med["processes"] / med["torch"], 2),
                               "processes_vs_threads": round(med["processes"] / med["threads"], 2)}
    return out


if __name__ == "__main__":
    np.set_printoptions(precision=2)
    print(json.dumps(main(), indent=1))  # a script's report: stdout is its output
