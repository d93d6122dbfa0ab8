"""Decoding only the crop (``Decode(crop_window=True)``, the default; _kernels/crop_window.py):
the same pixels as the full decode's crop on every subsampling, baseline and progressive, with
and without DCT scaling; the CPU lanes identical; bad files named as before; the full decode
without the turbojpeg wheel; the window really smaller than the image."""

from __future__ import annotations

import functools
import io
from pathlib import Path

import pytest
import torch
from PIL import Image

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import SampleError
from hybridload._kernels import crop_window, turbo
from hybridload._kernels.batch import process_payload
from hybridload._kernels.decode import decode_image, image_size, jpeg_size
from hybridload.recipe._ops import Crop, Resize
from hybridload.sources import SampleRef

from support.photos import photo_pixels
from support.streams import local_lane_streams

pytestmark = pytest.mark.skipif(not turbo.available(), reason="the turbojpeg wheel is not installed")


def _rec(size=24, **decode):
    return recipe.Recipe([recipe.Decode(**decode), recipe.RandomResizedCrop(size), recipe.HorizontalFlip()])


WINDOW, FULL = _rec(), _rec(crop_window=False)
SUBSAMPLING = {"444": 0, "422": 1, "420": 2, "gray": None}


@functools.lru_cache(maxsize=None)
def _photo(kind: str, progressive: bool, size=(1203, 901)) -> bytes:
    """A photo-like JPEG (smooth gradients, discs, grain) of ``size``: 4:4:4, 4:2:2, 4:2:0 or grey."""
    im = Image.fromarray(photo_pixels(size))
    buf, sub = io.BytesIO(), SUBSAMPLING[kind]
    if sub is None:
        im.convert("L").save(buf, "JPEG", quality=90, progressive=progressive)
    else:
        im.save(buf, "JPEG", quality=90, progressive=progressive, subsampling=sub)
    return buf.getvalue()


@pytest.mark.parametrize("dct, gap", [(False, 2.0), (True, 2.0), (True, 1.0)])
@pytest.mark.parametrize("progressive", [False, True])
@pytest.mark.parametrize("kind", list(SUBSAMPLING))
def test_window_pixels_equal_the_full_decodes_crop_on_every_subsampling(kind, progressive, dct, gap):
    data = _photo(kind, progressive)
    window = _rec(dct_scaling=dct, reducing_gap=gap)
    full = _rec(crop_window=False, dct_scaling=dct, reducing_gap=gap)
    used = 0
    for i in range(12):
        ref = SampleRef(i, "photo.jpg", 0)
        ops = window.sample_params(0, 0, i, 1203, 901).ops
        used += crop_window.window_decode(data, (1203, 901), ops, dct, gap) is not None
        assert torch.equal(process_payload(ref, data, window, 0, 0), process_payload(ref, data, full, 0, 0)), i
    assert used == 12


def test_windows_touching_each_edge_equal_the_full_decodes_crop():
    data = _photo("420", False)
    full = torch.from_numpy(decode_image(data)).permute(2, 0, 1)
    for x, y, w, h in (
        (0, 0, 17, 9),
        (1186, 0, 17, 33),
        (0, 892, 40, 9),
        (1186, 892, 17, 9),
        (0, 0, 1203, 901),
        (15, 17, 1, 1),
        (16, 16, 1, 1),
    ):
        arr, ops = crop_window.window_decode(data, (1203, 901), [Crop(x, y, w, h), Resize(h, w)])
        got = torch.from_numpy(arr)[ops[0].y : ops[0].y + h, ops[0].x : ops[0].x + w].permute(2, 0, 1)
        assert torch.equal(got, full[:, y : y + h, x : x + w]), (x, y, w, h)


def test_the_window_decoded_is_the_crop_not_the_image():
    data = _photo("420", False)
    arr, ops = crop_window.window_decode(data, (1203, 901), [Crop(600, 400, 100, 80), Resize(24, 24)])
    assert arr.shape[0] <= 80 + 2 * crop_window.MARGIN and arr.shape[1] <= 100 + 16 + 2 * crop_window.MARGIN
    assert ops[1:] == (Resize(24, 24),)


def test_a_windowed_samples_header_is_read_once(monkeypatch):
    """The size the keyed crop is drawn from and the window's decode share one header read on the
    thread's decompressor (simplejpeg's reader and a marker walk for the lossless check read it
    a second time, ~17 us a sample against a ~5 us read)."""
    import simplejpeg

    reads: list[str] = []

    def counted(name, real):
        def read(*args):
            reads.append(name)
            return real(*args)

        return read

    monkeypatch.setattr(turbo._LIB, "tj3DecompressHeader", counted("turbo", turbo._LIB.tj3DecompressHeader))
    monkeypatch.setattr(simplejpeg, "decode_jpeg_header", counted("simplejpeg", simplejpeg.decode_jpeg_header))
    for i in range(3):
        data = bytes(bytearray(_photo("420", False)))  # a sample's own bytes, as a read gives
        before = process_payload(SampleRef(i, "p.jpg", 0), data, WINDOW, 1, 2)
        assert reads == ["turbo"], reads
        reads.clear()
        assert torch.equal(before, process_payload(SampleRef(i, "p.jpg", 0), data, FULL, 1, 2))
        reads.clear()


def test_the_header_gives_the_size_simplejpeg_gives_on_every_kind_of_jpeg(monkeypatch):
    """Where the wheel loaded, its header reader sizes the sample; without it simplejpeg's does:
    the same size, or None, for every kind the fuzzer makes (12-bit, lossless, 4:4:1, CMYK,
    arithmetic, restart markers, progressive)."""
    from support.jpegs import base_images

    images = base_images(3)
    with_wheel = [jpeg_size(data) for _name, data in images]
    monkeypatch.setattr(turbo, "_LIB", None)
    assert [jpeg_size(data) for _name, data in images] == with_wheel
    assert 0 < sum(size is None for size in with_wheel) < len(images)


def test_no_window_where_the_full_decode_must_run():
    data = _photo("420", False)
    ops = [Crop(0, 0, 100, 100), Resize(24, 24)]
    assert crop_window.window_decode(data, (1203, 901), [Resize(24, 24), Crop(0, 0, 10, 10)]) is None
    assert crop_window.window_decode(data, (1203, 901), [Crop(-4, 0, 100, 100), Resize(24, 24)]) is None
    assert crop_window.window_decode(data[: len(data) // 2], (1203, 901), ops) is None  # truncated
    cmyk = io.BytesIO()
    Image.open(io.BytesIO(data)).convert("CMYK").save(cmyk, "JPEG")
    assert crop_window.window_decode(cmyk.getvalue(), (1203, 901), ops) is None


def test_without_the_wheel_the_full_decode_gives_the_same_pixels(monkeypatch):
    data, ref = _photo("422", False), SampleRef(3, "p.jpg", 0)
    with_wheel = process_payload(ref, data, WINDOW, 1, 2)
    monkeypatch.setattr(turbo, "_LIB", None)
    assert crop_window.window_decode(data, (1203, 901), [Crop(0, 0, 50, 50), Resize(24, 24)]) is None
    assert torch.equal(process_payload(ref, data, WINDOW, 1, 2), with_wheel)


def test_every_cpu_lane_gives_the_full_decodes_stream(photo_root):
    src = sources.ImageFolder(photo_root)
    runs, _ = local_lane_streams(src, WINDOW, 7, seed=5, epochs=(0,), threads=2)
    full, _ = local_lane_streams(src, FULL, 7, seed=5, epochs=(0,), threads=2)
    assert runs["processes"] == runs["threads"] == full["threads"] and len(runs["threads"]) == 9


def test_the_ray_lane_gives_the_in_process_lanes_window_stream(ray_cluster, photo_root):
    from support.streams import stream

    src = sources.FileList(sources.ImageFolder(photo_root).paths[:24], list(range(24)))
    runs, lanes = [], []
    for policy in (
        LoaderPolicy(mode="cpu", cpu_actors=0, threads=1),
        LoaderPolicy(ray_address="embedded", mode="cpu", cpu_actors=2, reserve_local_cpus=2),
    ):
        with HybridLoader(src, WINDOW, 8, seed=3, device="cpu", return_indices=True, policy=policy) as ld:
            runs.append(stream(ld, (0, 1)))
            lanes.append({k for k, v in ld.stats()["lanes"].items() if v["images"]})
    assert runs[0] == runs[1] and len(runs[0]) == 6
    assert any("ray" in name for name in lanes[1]), lanes  # the Ray actors decoded windows too


@pytest.mark.parametrize("kind", ["truncated", "corrupt", "huge", "text", "zero", "cmyk", "gray", "gray16", "png"])
def test_bad_and_unusual_files_are_handled_as_by_the_full_decode(bad_files, kind):
    src = sources.FileList([bad_files[kind]])
    got = []
    for rec in (FULL, WINDOW):
        with HybridLoader(src, rec, 1, device="cpu", policy=LoaderPolicy(cpu_actors=0, threads=1)) as ld:
            try:
                got.append([images for images, _labels in ld])
            except SampleError as exc:
                got.append((exc.index, exc.path, exc.stage, exc.reason))
    if isinstance(got[0], tuple):
        assert got[0] == got[1]
    else:
        assert torch.equal(got[0][0], got[1][0])


def test_exif_orientation_is_ignored_by_the_window_as_by_the_full_decode():
    im = Image.open(io.BytesIO(_photo("420", False)))
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display": neither decode applies it
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90, exif=exif.tobytes())
    data = buf.getvalue()
    for i in range(6):
        ref = SampleRef(i, "exif.jpg", 0)
        assert torch.equal(process_payload(ref, data, WINDOW, 0, 0), process_payload(ref, data, FULL, 0, 0))
    assert crop_window.window_decode(data, (1203, 901), [Crop(0, 0, 64, 64), Resize(24, 24)]) is not None


def test_decode_flags_take_only_booleans():
    with pytest.raises(ValueError, match="crop_window must be True or False"):
        recipe.Decode(crop_window="yes")
    with pytest.raises(ValueError, match="dct_scaling must be True or False"):
        recipe.Decode(dct_scaling=1)


@pytest.mark.parametrize("gap", [0.5, 0, True, "2", float("nan"), float("inf")])
def test_reducing_gap_takes_a_number_of_at_least_one(gap):
    with pytest.raises(ValueError, match="reducing_gap must be a number of at least 1.0"):
        recipe.Decode(dct_scaling=True, reducing_gap=gap)
    assert recipe.Decode(reducing_gap=1).reducing_gap == 1.0


def test_a_4_4_1_jpeg_decodes_in_every_kernel_path_instead_of_a_keyerror():
    """libjpeg-turbo 3 writes 4:4:1 (chroma at a quarter of the rows); simplejpeg 1.9's header
    reader has no name for it and raised a bare KeyError out of the kernel (found by
    benchmarks/fuzz_decode_window.py): the full decode takes it, in both settings."""
    from support.jpegs import TJ_SUBSAMPLINGS, tj_compress

    data = tj_compress(photo_pixels((203, 101)), {"quality": 90, "subsamp": TJ_SUBSAMPLINGS["441"]})
    assert data is not None
    ref = SampleRef(0, "441.jpg", 0)
    got = [process_payload(ref, data, rec, 0, 0) for rec in (WINDOW, FULL)]
    assert torch.equal(got[0], got[1]) and got[0].shape == (3, 24, 24)
    assert decode_image(data).shape == (101, 203, 3)
    assert image_size(data) == (203, 101) and jpeg_size(data) is None  # the window leaves it to the full decode


def test_the_crop_decoders_wheel_is_asked_for_only_where_it_ships_wheels():
    """``turbojpeg`` 0.0.2 has wheels for CPython 3.11-3.13 on x86-64 Linux and no sdist: a
    requirement that matched elsewhere (3.14, aarch64) would fail ``pip install hybridload``,
    where the kernels would only have decoded fully."""
    import tomllib

    from packaging.requirements import Requirement

    deps = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    (req,) = [Requirement(d) for d in deps["dependencies"] if Requirement(d).name == "turbojpeg"]
    assert req.marker is not None
    linux = {"platform_system": "Linux", "platform_machine": "x86_64"}
    for version, wheel in (("3.11", True), ("3.12", True), ("3.13", True), ("3.14", False), ("3.15", False)):
        assert req.marker.evaluate({**linux, "python_version": version}) is wheel, version
    assert not req.marker.evaluate({**linux, "platform_machine": "aarch64", "python_version": "3.11"})
