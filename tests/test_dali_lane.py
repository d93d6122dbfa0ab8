"""The DALI GPU engine (DALI's CPU-only mode here) and the hybrid split into one ordered stream."""

import sys
import threading

import pytest
import torch

from hybridload.lanes import _once as once
from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import SampleError
from hybridload.lanes._gpu.dali import DaliLane
from hybridload._pipelines import chain_for

REC = recipe.imagenet_train(64)
BS = 6

# Stated tolerance, DALI lane against the CPU lanes (same crop boxes and flips): mean
# absolute difference at most 0.5 grey levels per batch, fewer than 1% of values off by
# more than 2 levels. Cause: DALI's antialiased linear resize and its JPEG decoder's
# upsampling round differently from torch's resize over libjpeg-turbo (measured on the
# photo set: mean 0.11-0.16, max 1 for Resize+CenterCrop, up to 6 for RandomResizedCrop
# and up to 16 for strongly anisotropic resizes).
MEAN_TOL = 0.5
OUTLIER_FRACTION = 0.01


def run(src, policy, rec=REC, epochs=(0, 1), bs=BS):
    out = []
    with HybridLoader(src, rec, bs, policy=policy, seed=7, return_indices=True) as ld:
        for e in epochs:
            ld.set_epoch(e)
            out += [(idx.tolist(), lab.tolist(), img) for img, lab, idx in ld]
        stats = ld.stats()
    return out, stats


def test_dali_lane_index_stream_equals_cpu_lane_and_pixels_within_tolerance(photo_root):
    src = sources.ImageFolder(photo_root)
    cpu, _ = run(src, LoaderPolicy(mode="cpu", cpu_actors=0, threads=2))
    gpu, stats = run(src, LoaderPolicy(mode="gpu", gpu_engine="dali"))
    assert stats["lanes"]["gpu"]["share"] == 1.0
    assert [(i, lab) for i, lab, _ in gpu] == [(i, lab) for i, lab, _ in cpu]
    for (_, _, a), (_, _, b) in zip(gpu, cpu):
        d = (a.int() - b.int()).abs().float()
        assert d.mean() <= MEAN_TOL and (d > 2).float().mean() < OUTLIER_FRACTION


def test_eval_recipe_and_normalize_on_the_dali_lane(photo_root):
    src = sources.ImageFolder(photo_root)
    rec = recipe.imagenet_eval(48, normalize=True)
    cpu, _ = run(src, LoaderPolicy(mode="cpu", cpu_actors=0), rec=rec, epochs=(0,))
    gpu, _ = run(src, LoaderPolicy(mode="gpu", gpu_engine="dali"), rec=rec, epochs=(0,))
    for (ia, _, a), (ib, _, b) in zip(gpu, cpu):
        assert ia == ib and a.dtype == torch.float32
        assert (a - b).abs().mean() <= MEAN_TOL / (255 * 0.224)


@pytest.mark.parametrize("share", [0.3, 0.7])
def test_split_shares_give_the_identical_index_stream_and_respect_the_cap(photo_root, share):
    src = sources.ImageFolder(photo_root)
    ref, _ = run(src, LoaderPolicy(mode="cpu", cpu_actors=0))
    got, stats = run(src, LoaderPolicy(mode="split", gpu_share=share, gpu_engine="dali", cpu_actors=0, threads=1))
    assert [(i, lab) for i, lab, _ in got] == [(i, lab) for i, lab, _ in ref]
    lanes = stats["lanes"]
    batches = lanes["gpu"]["batches"] + lanes["inprocess"]["batches"]
    assert lanes["gpu"]["batches"] <= share * batches + 1
    assert lanes["gpu"]["batches"] > 0 and lanes["inprocess"]["batches"] > 0


def test_split_share_zero_and_one_give_the_identical_index_stream(photo_root):
    src = sources.ImageFolder(photo_root)
    ref, _ = run(src, LoaderPolicy(mode="cpu", cpu_actors=0))
    zero, s0 = run(src, LoaderPolicy(mode="split", gpu_share=0.0, gpu_engine="dali", cpu_actors=0))
    one, s1 = run(src, LoaderPolicy(mode="split", gpu_share=1.0, gpu_engine="dali", cpu_actors=0, threads=1))
    key = [(i, lab) for i, lab, _ in ref]
    assert [(i, lab) for i, lab, _ in zero] == key and [(i, lab) for i, lab, _ in one] == key
    assert "gpu" not in s0["lanes"]
    assert s1["lanes"]["gpu"]["batches"] > 0


def test_a_gpu_lane_that_raises_mid_epoch_hands_over_to_the_cpu_lane(photo_root, monkeypatch):
    src = sources.ImageFolder(photo_root)
    ref, _ = run(src, LoaderPolicy(mode="cpu", cpu_actors=0))
    calls = {"n": 0}
    real = DaliLane.run_batch

    def flaky(self, task):
        calls["n"] += 1
        if calls["n"] > 3:
            raise RuntimeError("simulated GPU lane failure (CUDA error)")
        return real(self, task)

    monkeypatch.setattr(DaliLane, "run_batch", flaky)
    for policy in (
        LoaderPolicy(mode="gpu", gpu_engine="dali"),
        LoaderPolicy(mode="split", gpu_share=0.7, gpu_engine="dali", cpu_actors=0),
    ):
        calls["n"] = 0
        got, stats = run(src, policy)
        assert [(i, lab) for i, lab, _ in got] == [(i, lab) for i, lab, _ in ref]
        assert stats["retries"] >= 1
        assert stats["lanes"]["gpu"]["batches"] == 3
        # batches the CPU lane made are bit-identical to the CPU-only run
        cpu_made = sum(torch.equal(a, b) for (_, _, a), (_, _, b) in zip(got, ref))
        assert cpu_made >= len(ref) - 3


def test_missing_dali_falls_back_to_the_cpu_lane_with_a_warning(photo_root, monkeypatch):
    src = sources.ImageFolder(photo_root)
    ref, _ = run(src, LoaderPolicy(mode="cpu", cpu_actors=0))
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # import nvidia.dali now raises ImportError
    monkeypatch.setattr(once, "_said", set())  # as in a fresh process: the warning comes
    with pytest.warns(RuntimeWarning, match="GPU lane is unavailable.*DALI"):
        got, stats = run(src, LoaderPolicy(mode="split", gpu_share=0.5, gpu_engine="dali", cpu_actors=0))
    assert [(i, lab, torch.equal(img, r)) for (i, lab, img), (_, _, r) in zip(got, ref)] == [
        (i, lab, True) for i, lab, _ in ref
    ]
    assert list(stats["lanes"]) == ["inprocess"]


@pytest.mark.parametrize("kind", ["truncated", "zero", "text", "missing"])
def test_bad_input_on_the_gpu_lane_ends_in_the_cpu_lanes_exact_error(photo_root, bad_files, kind):
    paths = list(sources.ImageFolder(photo_root).paths[:12])
    paths[8] = bad_files[kind]
    src = sources.FileList(paths, list(range(12)))
    with HybridLoader(src, REC, 4, shuffle=False, policy=LoaderPolicy(mode="gpu", gpu_engine="dali")) as ld:
        got = []
        with pytest.raises(SampleError) as info:
            for _img, lab in ld:
                got.append(lab.tolist())
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert (info.value.index, info.value.path) == (8, bad_files[kind])
    with HybridLoader(
        src, REC, 4, shuffle=False, policy=LoaderPolicy(mode="gpu", gpu_engine="dali", on_error="skip")
    ) as ld:
        batches = list(ld)
        assert len(batches) == 3 and ld.stats()["skipped"] == 1


def test_a_png_batch_is_rerouted_to_the_cpu_lane_and_decoded_there(photo_root, bad_files):
    paths = list(sources.ImageFolder(photo_root).paths[:12])
    paths[8] = bad_files["png"]
    src = sources.FileList(paths, list(range(12)))
    with (
        HybridLoader(src, REC, 4, shuffle=False, policy=LoaderPolicy(mode="gpu", gpu_engine="dali")) as gpu_ld,
        HybridLoader(src, REC, 4, shuffle=False, policy=LoaderPolicy(mode="cpu", cpu_actors=0)) as cpu_ld,
    ):
        gpu, cpu = list(gpu_ld), list(cpu_ld)
        assert torch.equal(gpu[2][0], cpu[2][0])  # the PNG's batch was made by the CPU lane
        assert gpu_ld.stats()["lanes"]["inprocess"]["batches"] == 1


def test_recipes_outside_the_dali_chain_are_refused_clearly():
    rec = recipe.Recipe([recipe.Decode(), recipe.Resize(40), recipe.CenterCrop(32), recipe.Resize((16, 16))])
    with pytest.raises(ValueError, match=r"GPU lane runs recipes of the form \[crop\] \[resize\] \[crop\] \[flip\]"):
        chain_for(rec)


def test_close_releases_the_pipeline_and_its_thread(photo_root):
    src = sources.ImageFolder(photo_root)
    ld = HybridLoader(src, REC, BS, policy=LoaderPolicy(mode="gpu", gpu_engine="dali"))
    next(iter(ld))
    lane = ld._lanes[0]
    assert lane.name == "gpu" and lane._pipe is not None
    ld.close()
    assert lane._pipe is None
    assert not [t for t in threading.enumerate() if t.name.startswith("hybridload-gpu") and t.is_alive()]
