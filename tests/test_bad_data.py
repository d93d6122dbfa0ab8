"""Bad data in every lane: the error names index, path and stage; decodable oddities decode;
on_error="skip" substitutes deterministically and counts."""

import os
import struct

import pytest
import torch

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import SampleError

REC = recipe.imagenet_train(32)
LANES = {
    "inprocess": lambda **kw: LoaderPolicy(mode="cpu", cpu_actors=0, **kw),
    "ray": lambda **kw: LoaderPolicy(ray_address="embedded", mode="cpu", cpu_actors=2, reserve_local_cpus=1, **kw),
    "gpu": lambda **kw: LoaderPolicy(mode="gpu", **kw),
}
ERRORS = {"truncated": "Decode", "zero": "Decode", "text": "Decode", "missing": "read", "huge": "Decode"}
DECODABLE = ["png", "gray", "cmyk", "gray16"]


@pytest.fixture(scope="module")
def more_bad(bad_files, tmp_path_factory):
    """A JPEG whose header claims 20000 x 20000 pixels (beyond the 178,956,970-pixel limit),
    and an unreadable file."""
    root = tmp_path_factory.mktemp("more-bad")
    data = bytearray(open(bad_files["good"], "rb").read())
    k = 2
    while k < len(data):  # find the SOF0/SOF2 marker and rewrite its height and width
        marker, length = data[k + 1], struct.unpack(">H", data[k + 2:k + 4])[0]
        if marker in (0xC0, 0xC2):
            data[k + 5:k + 9] = struct.pack(">HH", 20000, 20000)
            break
        k += 2 + length
    huge = root / "huge.jpg"
    huge.write_bytes(bytes(data))
    locked = root / "locked.jpg"
    locked.write_bytes(open(bad_files["good"], "rb").read())
    locked.chmod(0)
    return {**bad_files, "huge": str(huge), "locked": str(locked)}


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
def test_bad_input_error_names_index_path_and_stage_in_every_lane(photo_root, more_bad, lane_policy, kind):
    src = source_with(photo_root, more_bad[kind])
    got = []
    with HybridLoader(src, REC, 2, shuffle=False, policy=lane_policy()) as ld:
        with pytest.raises(SampleError) as info:
            for _img, lab in ld:
                got.append(lab.tolist())
    assert got == [[0, 1], [2, 3]]  # what came before is delivered
    err = info.value
    assert (err.index, err.path, err.stage) == (5, more_bad[kind], ERRORS[kind])
    assert f"sample 5 ({more_bad[kind]})" in str(err)


@pytest.mark.parametrize("lane_policy", list(LANES), indirect=True)
def test_skip_substitutes_and_counts_in_every_lane(photo_root, more_bad, lane_policy):
    src = source_with(photo_root, more_bad["truncated"])
    with HybridLoader(src, REC, 2, shuffle=False, policy=lane_policy(on_error="skip")) as ld:
        batches = list(ld)
        st = ld.stats()
    assert len(batches) == 4 and batches[2][0][1].eq(0).all()
    assert st["skipped"] == 1 and st["skipped_samples"][0]["index"] == 5


@pytest.mark.parametrize("lane_policy", list(LANES), indirect=True)
@pytest.mark.parametrize("kind", DECODABLE)
def test_png_grayscale_cmyk_and_16_bit_decode_in_every_lane(photo_root, more_bad, lane_policy, kind):
    src = source_with(photo_root, more_bad[kind])
    with HybridLoader(src, REC, 2, shuffle=False, policy=lane_policy(), return_indices=True) as ld:
        batches = list(ld)
    img = batches[2][0][1]
    assert img.shape == (3, 32, 32) and img.float().std() > 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_unreadable_file_is_named(photo_root, more_bad):
    src = source_with(photo_root, more_bad["locked"])
    with HybridLoader(src, REC, 2, shuffle=False, policy=LANES["inprocess"]()) as ld:
        with pytest.raises(SampleError, match="stage 'read'.*PermissionError"):
            list(ld)
