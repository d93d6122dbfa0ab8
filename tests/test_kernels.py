"""Kernels agree with a straightforward Pillow reference; bad input names index, path, stage."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from PIL import Image

from hybridload import recipe as R
from hybridload import sources
from hybridload.errors import SampleError
from hybridload._kernels import process_sample
from hybridload.lanes._cpu_job import process_batch
from hybridload.recipe._ops import Crop, Flip, Resize

# Stated tolerance against Pillow (decode, crop, BILINEAR resize, flip): at most 1 grey
# level on any pixel, mean absolute difference under 0.25 per image. Cause: torch's
# antialiased bilinear uint8 resize rounds its fixed-point weights differently from
# Pillow's; decoding is bit-identical (both use libjpeg-turbo with the same settings).
MAX_ABS = 1
MAX_MEAN = 0.25


PILLOW_OPS = {
    Crop: lambda im, op: im.crop((op.x, op.y, op.x + op.w, op.y + op.h)),
    Resize: lambda im, op: im.resize((op.w, op.h), Image.BILINEAR),
    Flip: lambda im, op: im.transpose(Image.FLIP_LEFT_RIGHT),
}


def pillow_reference(path, params):
    im = Image.open(path).convert("RGB")
    for op in params.ops:
        im = PILLOW_OPS[type(op)](im, op)
    return np.asarray(im).transpose(2, 0, 1).astype(np.int16)


@pytest.mark.parametrize(
    "rec",
    [R.imagenet_train(224), R.imagenet_eval(224), R.Recipe([R.Decode(), R.Resize((96, 128)), R.HorizontalFlip(1.0)])],
    ids=["train", "eval", "resize-flip"],
)
def test_kernels_agree_with_pillow_reference(photo_root, rec):
    src = sources.ImageFolder(photo_root)
    for i in range(0, len(src), 3):
        out, label = process_sample(src, rec, i, seed=0, epoch=1)
        assert label == src.ref(i).label
        with Image.open(src.paths[i]) as im:
            params = rec.sample_params(0, 1, i, *im.size)
        ref = pillow_reference(src.paths[i], params)
        diff = np.abs(out.numpy().astype(np.int16) - ref)
        assert diff.max() <= MAX_ABS and diff.mean() < MAX_MEAN, (i, diff.max(), diff.mean())


def test_same_seed_epoch_index_same_pixels_whatever_the_thread_count(photo_root):
    src = sources.ImageFolder(photo_root)
    rec = R.imagenet_train(64)
    idx = list(range(0, 40))
    serial = process_batch(src, rec, idx, seed=3, epoch=2).images
    batches = [idx[k : k + 5] for k in range(0, 40, 5)]
    for threads in (2, 4):
        with ThreadPoolExecutor(threads) as pool:
            parts = list(pool.map(lambda b: process_batch(src, rec, b, seed=3, epoch=2).images, batches))
        assert torch.equal(torch.cat(parts), serial)
    # and a second run, in another order, gives the same pixels per index
    rev = process_batch(src, rec, idx[::-1], seed=3, epoch=2).images
    assert torch.equal(rev.flip(0), serial)
    other_epoch = process_batch(src, rec, idx, seed=3, epoch=3).images
    assert not torch.equal(other_epoch, serial)


@pytest.mark.parametrize(
    "kind,stage",
    [("truncated", "Decode"), ("zero", "Decode"), ("text", "Decode"), ("corrupt", "Decode"), ("missing", "read")],
)
def test_bad_input_error_names_index_path_and_stage(bad_files, kind, stage):
    src = sources.FileList([bad_files["good"], bad_files[kind]], [0, 1])
    with pytest.raises(SampleError) as info:
        process_batch(src, R.imagenet_train(32), [0, 1], 0, 0)
    err = info.value
    assert (err.index, err.path, err.stage) == (1, bad_files[kind], stage)
    assert bad_files[kind] in str(err) and "sample 1" in str(err) and stage in str(err)


@pytest.mark.parametrize("kind", ["png", "gray", "cmyk", "gray16"])
def test_other_formats_decode_to_rgb(bad_files, kind):
    src = sources.FileList([bad_files[kind]], [0])
    out, _ = process_sample(src, R.imagenet_eval(32), 0, 0, 0)
    assert out.shape == (3, 32, 32) and out.dtype == torch.uint8
    if kind in ("gray", "gray16"):
        assert torch.equal(out[0], out[1]) and torch.equal(out[1], out[2])
    assert out.float().std() > 1  # a real picture, not a blank substitute


def test_skip_substitutes_zeros_deterministically(bad_files):
    src = sources.FileList([bad_files["good"], bad_files["truncated"], bad_files["good"]], [0, 1, 2])
    res = process_batch(src, R.imagenet_eval(32), [0, 1, 2], 0, 0, on_error="skip")
    assert res.images[1].eq(0).all() and torch.equal(res.images[0], res.images[2])
    assert res.labels.tolist() == [0, 1, 2]
    assert [(i, p, s) for i, p, s, _ in res.skipped] == [(1, bad_files["truncated"], "Decode")]
    again = process_batch(src, R.imagenet_eval(32), [0, 1, 2], 0, 0, on_error="skip")
    assert torch.equal(res.images, again.images)


def test_torch_dataset_payloads(photo_root):
    arr = np.random.default_rng(0).integers(0, 255, (40, 50, 3), dtype=np.uint8)

    class DS:
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return [arr, Image.fromarray(arr), torch.from_numpy(arr).permute(2, 0, 1)][i], 10 + i

    src = sources.TorchDataset(DS())
    res = process_batch(src, R.Recipe([R.Decode(), R.CenterCrop(20)]), [0, 1, 2], 0, 0)
    assert res.labels.tolist() == [10, 11, 12]
    assert torch.equal(res.images[0], res.images[1]) and torch.equal(res.images[1], res.images[2])
    assert torch.equal(res.images[0], torch.from_numpy(arr[10:30, 15:35]).permute(2, 0, 1))


def test_center_crop_larger_than_image_pads_with_zeros():
    arr = np.full((10, 10, 3), 200, np.uint8)
    src = sources.TorchDataset([(arr, 0)])
    out, _ = process_sample(src, R.Recipe([R.Decode(), R.CenterCrop(14)]), 0, 0, 0)
    assert out[:, 2:12, 2:12].eq(200).all() and out[:, :2].eq(0).all() and out[:, :, 12:].eq(0).all()


def test_torch_dataset_errors_name_the_item():
    class Broken:
        def __len__(self):
            return 2

        def __getitem__(self, i):
            raise KeyError(i)

    with pytest.raises(SampleError, match=r"sample 1 \(Broken\[1\]\) failed at stage 'read'"):
        process_sample(sources.TorchDataset(Broken()), R.imagenet_eval(8), 1, 0, 0)


def test_pixel_limit_is_one_check_refusing_empty_and_oversized_images():
    from hybridload._kernels import MAX_IMAGE_PIXELS, DecodeError, check_pixels

    check_pixels(1, 1)
    check_pixels(MAX_IMAGE_PIXELS, 1)
    with pytest.raises(DecodeError, match="exceeds the limit"):
        check_pixels(MAX_IMAGE_PIXELS + 1, 1)
    with pytest.raises(DecodeError, match="empty size"):
        check_pixels(0, 5)


def test_process_batch_writes_into_a_given_buffer_the_same_images_it_would_allocate(photo_root):
    src, rec = sources.ImageFolder(photo_root), R.imagenet_train(32)
    fresh = process_batch(src, rec, np.arange(5), seed=3, epoch=1)
    into = torch.full(tuple(rec.output_shape(5)), 7, dtype=torch.uint8)
    got = process_batch(src, rec, np.arange(5), seed=3, epoch=1, out=into)
    assert got.images.data_ptr() == into.data_ptr() and torch.equal(into, fresh.images)
    with pytest.raises(ValueError, match=r"out must be a uint8 tensor of shape \(4, 3, 32, 32\)"):
        process_batch(src, rec, np.arange(4), seed=3, epoch=1, out=into)


def test_process_batch_takes_a_group_through_each_step_before_the_next(photo_root, monkeypatch):
    """The batch job plans every sample of a group, then decodes them, then resizes and writes
    them: one sample at a time the decode evicts the Python and the resize from the caches."""
    from hybridload._kernels import batch

    steps: list[str] = []
    params, window, resize = R.Recipe.sample_params, batch.window_decode, batch.resize_kept
    monkeypatch.setattr(R.Recipe, "sample_params", lambda *a, **k: steps.append("params") or params(*a, **k))
    monkeypatch.setattr(batch, "window_decode", lambda *a, **k: steps.append("decode") or window(*a, **k))
    monkeypatch.setattr(batch, "resize_kept", lambda *a, **k: steps.append("geometry") or resize(*a, **k))
    process_batch(sources.ImageFolder(photo_root), R.imagenet_train(32), np.arange(6), seed=3, epoch=1)
    assert steps == ["params"] * 6 + ["decode"] * 6 + ["geometry"] * 6


@pytest.mark.parametrize(
    "stages",
    [
        [R.Decode(), R.RandomResizedCrop(24), R.HorizontalFlip(0.5)],
        [R.Decode(), R.RandomResizedCrop(24), R.HorizontalFlip(0.5), R.ToTensor(layout="HWC")],
        [R.Decode(), R.RandomResizedCrop(24), R.HorizontalFlip(1.0), R.ColorJitter(brightness=0.4)],
        [R.Decode(crop_window=False), R.Resize(28), R.CenterCrop(24), R.HorizontalFlip(1.0)],
    ],
    ids=["flip-last", "hwc", "colour-after-flip", "full-decode-eval"],
)
def test_process_batch_gives_each_sample_the_pixels_and_error_it_gives_alone(
    bad_files, photo_root, monkeypatch, stages
):
    """In groups, with the decoded pixels finished every few samples (HELD_BYTES), each image
    is the one `process_sample` gives alone, a bad sample skipped or raised in sample order."""
    from hybridload._kernels import batch

    monkeypatch.setattr(batch, "GROUP", 4)
    monkeypatch.setattr(batch, "HELD_BYTES", 1)  # each decode finished at once: the flush path
    photos = sources.ImageFolder(photo_root).paths[:7]
    paths = [*photos[:2], bad_files["truncated"], *photos[2:5], bad_files["text"], *photos[5:]]
    src, rec = sources.FileList(paths, list(range(len(paths)))), R.Recipe(stages)
    res = process_batch(src, rec, np.arange(len(paths)), seed=5, epoch=2, on_error="skip")
    assert [s[0] for s in res.skipped] == [2, 6] and res.labels.tolist() == list(range(len(paths)))
    for i in range(len(paths)):
        want = torch.zeros_like(res.images[i]) if i in (2, 6) else process_sample(src, rec, i, 5, 2)[0]
        assert torch.equal(res.images[i], want), i
    with pytest.raises(SampleError) as info:
        process_batch(src, rec, np.arange(len(paths)), seed=5, epoch=2)
    assert info.value.index == 2


#: (progressive, restart markers, width, height) of each Pillow-made kind.
FORMS = ((False, False, 129, 95), (True, False, 64, 48), (False, True, 33, 47))


def _jpegs_of_every_kind() -> list[tuple[str, bytes]]:
    """JPEGs of every kind the decoders meet (subsamplings, progressive, restart markers,
    arithmetic, lossless, 12-bit, CMYK) at small sizes, and the same damaged four ways."""
    import support.jpegs as fj
    from hybridload._kernels.jpeg_markers import jpeg_segments

    kinds = [
        (
            f"{kind}-{'prog' if prog else 'base'}{'-rst' if rst else ''}",
            fj.pillow(fj.pixels(w, h, seed), kind, prog, rst),
        )
        for seed, (kind, prog, rst, w, h) in enumerate(
            [(k, p, r, w, h) for k in ("444", "422", "420", "gray", "cmyk") for p, r, w, h in FORMS]
        )
    ]
    tj = {"440": {"subsamp": 4}, "411": {"subsamp": 5}, "441": {"subsamp": 6}, "arith": {"subsamp": 2, "arithmetic": 1}}
    tj |= {"lossless": {"lossless": 1}, "440-rst": {"subsamp": 4, "restartrows": 1}}
    for seed, (name, params) in enumerate(tj.items()):
        kinds.append((name, fj.tj_compress(fj.pixels(129, 95, seed), {"quality": 90, **params})))
    kinds.append(("12bit", fj.tj_compress(fj.pixels(64, 48, 9), {"quality": 90, "subsamp": 2}, bits=12)))
    kinds = [(name, data) for name, data in kinds if data is not None]
    damaged = []
    for name, data in kinds[::4]:
        scan = next(end for marker, _start, end in jpeg_segments(data) if marker == 0xDA)
        entropy = bytearray(data)
        entropy[scan + (len(data) - scan) // 3] ^= 0x5A
        no_tables = b"".join(data[s:e] for m, s, e in jpeg_segments(data) if m != 0xDB)
        damaged += [
            (f"{name} cut", data[: (scan + len(data)) // 2]),
            (f"{name} cut+eoi", data[: (scan + len(data)) // 2] + b"\xff\xd9"),
            (f"{name} entropy", bytes(entropy)),
            (f"{name} no-dqt", data[:2] + no_tables + data[scan:]),
        ]
    return kinds + damaged


def _outcome(got) -> tuple:
    return ("error", type(got).__name__, getattr(got, "stage", None), str(got)) if isinstance(got, Exception) else got


@pytest.mark.parametrize("flip", [1.0, 0.0], ids=["mirrored", "plain"])
def test_a_group_gives_each_jpeg_of_every_kind_the_pixels_and_error_it_gives_alone(flip):
    """`process_payloads` (the headers and parameters of a group, then the decodes, then the
    finishes) against `process_payload` one sample at a time on JPEGs of every kind, whole and
    damaged: the same image, or the same error (class, stage, text), for each."""
    from hybridload._kernels.batch import process_payload, process_payloads
    from hybridload.recipe._core import sample_generators
    from hybridload.sources import SampleRef

    cases = _jpegs_of_every_kind()
    rec = R.Recipe([R.Decode(), R.RandomResizedCrop(24), R.HorizontalFlip(flip)])
    refs = [SampleRef(i, name, 0) for i, (name, _data) in enumerate(cases)]
    out = torch.zeros(tuple(rec.output_shape(len(cases))), dtype=torch.uint8)
    keyed = sample_generators(5, 2, np.arange(len(cases)))
    errors = process_payloads(refs, [d for _n, d in cases], rec, 5, 2, out, keyed.generator)
    alone = []
    for ref, (_name, data) in zip(refs, cases):
        try:
            alone.append(process_payload(ref, data, rec, 5, 2))
        except Exception as exc:
            alone.append(exc)
    assert sum(isinstance(a, Exception) for a in alone) >= len(cases) // 10  # the damage is refused
    assert sum(not isinstance(a, Exception) for a in alone) >= len(cases) // 2
    for j, (ref, want) in enumerate(zip(refs, alone)):
        got = errors[j] if errors[j] is not None else out[j]
        if isinstance(want, Exception) or isinstance(got, Exception):
            assert _outcome(got) == _outcome(want), ref.location
        else:
            assert torch.equal(got, want), ref.location


def test_a_group_reads_each_jpeg_header_once(photo_root, monkeypatch):
    """The batch job reads a group's headers, then decodes their windows: each sample's
    decompressor keeps its header from the one step to the other (libjpeg-turbo's header read
    and a decompressor made again, ~2% of the kernel, where one per thread served a group)."""
    from hybridload._kernels import turbo

    reads: list[int] = []
    header = turbo._LIB.tj3DecompressHeader
    monkeypatch.setattr(turbo._LIB, "tj3DecompressHeader", lambda *a: reads.append(1) or header(*a))
    src = sources.ImageFolder(photo_root)
    res = process_batch(src, R.imagenet_train(32), np.arange(6), seed=3, epoch=1)
    assert len(reads) == 6 and not res.skipped


def test_a_batch_reads_the_recipes_output_size_and_layout_once(photo_root, monkeypatch):
    """The recipe's output size and layout are properties worked out from its stages on each
    read (~4 us a sample in the batch job's write): the job reads them once a call."""
    reads: list[str] = []
    out_hw, layout = R.Recipe.out_hw, R.Recipe.layout
    monkeypatch.setattr(R.Recipe, "out_hw", property(lambda self: reads.append("out_hw") or out_hw.fget(self)))
    monkeypatch.setattr(R.Recipe, "layout", property(lambda self: reads.append("layout") or layout.fget(self)))
    from hybridload._kernels.batch import process_payloads
    from hybridload.recipe._core import sample_generators

    src, rec = sources.ImageFolder(photo_root), R.imagenet_train(32)
    refs = [src.ref(i) for i in range(8)]
    out = torch.empty((8, 3, 32, 32), dtype=torch.uint8)
    keyed = sample_generators(3, 1, np.arange(8))
    errors = process_payloads(refs, [src.read(r)[0] for r in refs], rec, 3, 1, out, keyed.generator)
    assert errors == [None] * 8 and sorted(reads) == ["layout", "out_hw"]
