"""Bad data in every lane: the error names index, path and stage; decodable oddities decode;
on_error="skip" substitutes deterministically and counts."""

import os

import support.bad_files as testing
import pytest

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import SampleError

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
