"""Bad data in every lane: the error names index, path and stage; decodable oddities decode;
on_error="skip" substitutes deterministically and counts."""

import os

import support.bad_files as testing
import pytest
import simplejpeg
import torch

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import SampleError
from hybridload.lanes._gpu import torch_decoders
from support.damaged import KINDS, damaged_jpegs

REC = recipe.imagenet_train(32)
LANES = {
    "inprocess": lambda **kw: LoaderPolicy(mode="cpu", cpu_actors=0, **kw),
    "ray": lambda **kw: LoaderPolicy(ray_address="embedded", mode="cpu", cpu_actors=2, reserve_local_cpus=1, **kw),
    "gpu": lambda **kw: LoaderPolicy(mode="gpu", **kw),
}
ERRORS = {"truncated": "Decode", "zero": "Decode", "text": "Decode", "missing": "read", "huge": "Decode"}
DECODABLE = list(testing.DECODABLE)


def source_with(photo_root, path, at=5, n=8):
    paths = list(sources.ImageFolder(photo_root).paths[:n])
    paths[at] = path
    return sources.FileList(paths, list(range(n)))


@pytest.fixture
def lane_policy(request):
    name = request.param
    if name == "ray":
        request.getfixturevalue("ray_cluster")
    return LANES[name]


@pytest.mark.parametrize("lane_policy", list(LANES), indirect=True)
@pytest.mark.parametrize("kind", list(ERRORS))
def test_bad_input_error_names_index_path_and_stage_in_every_lane(photo_root, bad_files, lane_policy, kind):
    src = source_with(photo_root, bad_files[kind])
    got = []
    with HybridLoader(src, REC, 2, shuffle=False, policy=lane_policy()) as ld:
        with pytest.raises(SampleError) as info:
            for _img, lab in ld:
                got.append(lab.tolist())
    assert got == [[0, 1], [2, 3]]  # what came before is delivered
    err = info.value
    assert (err.index, err.path, err.stage) == (5, bad_files[kind], ERRORS[kind])
    assert f"sample 5 ({bad_files[kind]})" in str(err)


@pytest.mark.parametrize("lane_policy", list(LANES), indirect=True)
def test_skip_substitutes_and_counts_in_every_lane(photo_root, bad_files, lane_policy):
    src = source_with(photo_root, bad_files["truncated"])
    with HybridLoader(src, REC, 2, shuffle=False, policy=lane_policy(on_error="skip")) as ld:
        batches = list(ld)
        st = ld.stats()
    assert len(batches) == 4 and batches[2][0][1].eq(0).all()
    assert st["skipped"] == 1 and st["skipped_samples"][0]["index"] == 5


@pytest.mark.parametrize("lane_policy", list(LANES), indirect=True)
def test_png_grayscale_cmyk_and_16_bit_decode_in_every_lane(photo_root, bad_files, lane_policy):
    """Every decodable oddity in one pass per lane (a Ray pass starts its actors: seconds each)."""
    at = {kind: 2 * k + 1 for k, kind in enumerate(DECODABLE)}  # one per batch of 2
    paths = list(sources.ImageFolder(photo_root).paths[: 2 * len(DECODABLE)])
    for kind, i in at.items():
        paths[i] = bad_files[kind]
    src = sources.FileList(paths, list(range(len(paths))))
    with HybridLoader(src, REC, 2, shuffle=False, policy=lane_policy(), return_indices=True) as ld:
        images = {int(i): img for imgs, _labels, idx in ld for img, i in zip(imgs, idx)}
    for kind, i in at.items():
        assert images[i].shape == (3, 32, 32) and images[i].float().std() > 1, kind


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_unreadable_file_is_named(photo_root, bad_files):
    src = source_with(photo_root, bad_files["locked"])
    with HybridLoader(src, REC, 2, shuffle=False, policy=LANES["inprocess"]()) as ld:
        with pytest.raises(SampleError, match="stage 'read'.*PermissionError"):
            list(ld)


def lenient_decode(datas):
    """The torch engine's decoder contract, decoding as nvJPEG does: libjpeg's warnings ignored, a
    scan that runs out padded (torchvision does not load here; the CPU kernels decode strictly)."""
    return [torch.from_numpy(simplejpeg.decode_jpeg(d.numpy().tobytes(), strict=False)).permute(2, 0, 1) for d in datas]


#: Every lane a sample can be decoded on: the two local kinds, Ray actors, DALI (its CPU-only
#: stand-in here) and the torch GPU engine (on CPU tensors, with a decoder as lenient as nvJPEG's).
ALL_LANES = {
    "threads": lambda **kw: LoaderPolicy(mode="cpu", cpu_actors=0, local_workers="threads", **kw),
    "processes": lambda **kw: LoaderPolicy(mode="cpu", cpu_actors=0, local_workers="processes", **kw),
    "ray": LANES["ray"],
    "dali": lambda **kw: LoaderPolicy(mode="gpu", gpu_share=1.0, gpu_engine="dali", **kw),
    "torch": lambda **kw: LoaderPolicy(mode="gpu", gpu_share=1.0, gpu_engine="torch", cpu_actors=0, **kw),
}


@pytest.fixture
def every_lane(ray_cluster, monkeypatch):
    monkeypatch.setattr(torch_decoders, "gpu_decoder", lambda device: lenient_decode)
    return ALL_LANES


def damaged_source(photo_root, root, kinds) -> sources.FileList:
    """Pairs (a good photo, a damaged JPEG) per kind, then four good photos: batches of 2 hold one
    damaged file each, and the last two batches none (the GPU lanes decode those themselves)."""
    good = list(sources.ImageFolder(photo_root).paths)
    paths = []
    for k, (kind, data) in enumerate(damaged_jpegs().items()):
        if kind in kinds:
            path = os.path.join(root, f"{kind}.jpg")
            with open(path, "wb") as f:
                f.write(data)
            paths += [good[k], path]
    paths += good[-4:]
    return sources.FileList(paths, list(range(len(paths))))


def test_every_lane_skips_the_same_damaged_jpegs_with_the_same_records(photo_root, tmp_path, every_lane):
    src = damaged_source(photo_root, tmp_path, KINDS)
    seen = {}
    for name, policy in every_lane.items():
        with HybridLoader(src, REC, 2, shuffle=False, policy=policy(on_error="skip"), return_indices=True) as ld:
            batches = list(ld)
            stats = ld.stats()
        zero = [int(i) for imgs, _labels, idx in batches for img, i in zip(imgs, idx) if not img.any()]
        delivered = [(idx.tolist(), labels.tolist()) for _imgs, labels, idx in batches]
        records = sorted(stats["skipped_samples"], key=lambda r: r["index"])  # listed as the lanes finish them
        seen[name] = (delivered, zero, records)
        if name in ("dali", "torch"):
            assert stats["lanes"]["gpu"]["batches"] >= 2, name  # the GPU lane decoded the all-good batches
    damaged = list(range(1, 2 * len(KINDS), 2))
    assert seen["threads"][1] == damaged and [r["index"] for r in seen["threads"][2]] == damaged
    for name, got in seen.items():
        assert got == seen["threads"], name


def test_a_jpeg_declaring_more_pixels_than_its_data_holds_raises_the_same_error_on_every_lane(
    photo_root, tmp_path, every_lane
):
    """The frame says 65500x1, the scan holds a 64x48 image: strict libjpeg runs out of data,
    DALI and nvJPEG would pad it with garbage; every lane raises the CPU's SampleError."""
    src = damaged_source(photo_root, tmp_path, ("declared_65500x1",))
    seen = {}
    for name, policy in every_lane.items():
        got = []
        with HybridLoader(src, REC, 1, shuffle=False, policy=policy(on_error="raise")) as ld:
            with pytest.raises(SampleError) as info:
                for _img, labels in ld:
                    got.append(labels.tolist())
        err = info.value
        seen[name] = (got, err.index, err.path, err.stage, err.reason)
    assert seen["threads"][:4] == ([[0]], 1, os.path.join(tmp_path, "declared_65500x1.jpg"), "Decode")
    for name, got in seen.items():
        assert got == seen["threads"], name
