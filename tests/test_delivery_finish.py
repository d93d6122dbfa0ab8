"""Delivery finishes the batch: ``hybridload.delivery._finish.finish_batch`` normalizes a lane's
uint8 batch, then erases the recipe's boxes keyed by (seed, epoch, index); a CPU lane's batch job
(``process_batch``) leaves both to it, and the loader and the GPU lanes reach the finishing step
only through delivery/, never through the CPU engine's module."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import torch

from hybridload import recipe as R, sources
from hybridload.delivery._finish import finish_batch, normalize_batch
from hybridload.lanes._cpu_job import process_batch
from hybridload._kernels.erase import erase_batch

REPO = Path(__file__).resolve().parents[1]
REC = R.Recipe([R.Decode(), R.Resize(40), R.CenterCrop(32), R.Normalize(), R.RandomErasing(p=0.9, value="random")])


def test_finishing_is_normalize_then_erasing_keyed_by_seed_epoch_and_index():
    buf = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    idx = np.arange(40, 46)
    got = finish_batch(buf.clone(), REC, 7, 3, idx)
    want = erase_batch(normalize_batch(buf.clone(), REC), REC.erasing, REC.layout, 7, 3, idx)
    assert got.dtype == torch.float32 and torch.equal(got, want)
    assert not torch.equal(got, finish_batch(buf.clone(), REC, 7, 4, idx))  # another epoch: other boxes


def test_a_cpu_lanes_batch_is_uint8_whatever_the_recipe_and_delivery_finishes_it(photo_root):
    src, idx = sources.ImageFolder(photo_root), np.arange(5)
    raw = process_batch(src, REC, idx, seed=3, epoch=1).images
    plain = process_batch(src, R.Recipe(REC.stages[:3]), idx, seed=3, epoch=1).images
    assert raw.dtype == torch.uint8 and torch.equal(raw, plain)  # Normalize and RandomErasing left to delivery
    assert finish_batch(raw, REC, 3, 1, idx).dtype == torch.float32


def test_normalize_batch_matches_the_formula(photo_root):
    src = sources.ImageFolder(photo_root)
    plain = process_batch(src, R.imagenet_eval(32), [0, 1], 0, 0).images
    norm = normalize_batch(plain, R.imagenet_eval(32, normalize=True))
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    assert norm.dtype == torch.float32
    torch.testing.assert_close(norm, (plain.float() / 255 - mean) / std, atol=1e-5, rtol=1e-5)


def test_the_loader_and_the_gpu_lanes_finish_batches_through_delivery_only():
    for rel in ("hybridload/_loader.py", "hybridload/lanes/_gpu/base.py"):
        tree = ast.parse((REPO / rel).read_text())
        froms = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert ("hybridload.delivery._finish", "finish_batch") in froms, rel
        assert not any(m and m.startswith("hybridload._kernels") for m, _ in froms), (
            f"{rel} reaches into the CPU engine: a delivered batch is finished by hybridload.delivery._finish"
        )
