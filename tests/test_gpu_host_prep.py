"""The torch engine's host side: each batch's reads and keyed parameters are prepared in parts
on a small thread pool, started when the lane accepts the task; the resizes of same-shape
images are one launch. Same samples, same order, same pixels as one thread one image at a time."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from hybridload import recipe, sources
from hybridload._kernels import decode_image
from hybridload.lanes._base import BatchTask, Reroute
from hybridload._torchops import ops as torch_ops
from hybridload.lanes._gpu.feed import MIN_PART, parts_of
from hybridload.lanes._gpu.torch_lane import TorchGpuLane


def cpu_decode(datas):
    return [torch.from_numpy(decode_image(bytes(d.numpy()))).permute(2, 0, 1) for d in datas]


@pytest.mark.parametrize(
    "n, workers, sizes",
    [
        (256, 4, [64, 64, 64, 64]),
        (256, 1, [256]),
        (40, 4, [20, 20]),
        (10, 4, [10]),
        (0, 4, [0]),
        (255, 4, [64, 64, 63, 64]),
    ],
)
def test_a_batch_is_cut_into_contiguous_parts_of_at_least_min_part(n, workers, sizes):
    parts = parts_of(n, workers)
    assert [s.stop - s.start for s in parts] == sizes
    assert parts[0].start == 0 and parts[-1].stop == n
    assert all(a.stop == b.start for a, b in zip(parts, parts[1:]))
    assert all(s.stop - s.start >= MIN_PART for s in parts) or len(parts) == 1


def _lane(src, rec, gpu_threads):
    return TorchGpuLane(src, rec, batch_size=40, device="cpu", decode=cpu_decode, gpu_threads=gpu_threads)


def test_prepared_in_parts_the_batches_equal_one_thread_one_image_at_a_time(photo_root):
    src, rec = sources.ImageFolder(photo_root), recipe.imagenet_train(32)
    n = len(src)
    tasks = [BatchTask(k, 1, (np.arange(40) * 7 + k) % n, seed=3) for k in range(3)]
    one, many = _lane(src, rec, 1), _lane(src, rec, 4)
    try:
        for t in tasks:
            a, b = one.run_batch(t), many.run_batch(t)
            assert torch.equal(a.images, b.images) and np.array_equal(a.labels, b.labels)
            assert np.array_equal(b.indices, t.indices)
    finally:
        one.close()
        many.close()


def test_the_preparation_starts_when_the_lane_accepts_the_task(photo_root, monkeypatch):
    from hybridload.lanes._gpu import feed

    src, rec = sources.ImageFolder(photo_root), recipe.imagenet_train(32)
    names, real = [], feed.read_part

    def spy(*args):
        names.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(feed, "read_part", spy)
    lane = _lane(src, rec, 2)
    try:
        task = BatchTask(0, 0, np.arange(40) % len(src))
        run = lane.runner(task)  # what the dispatcher calls on accepting it
        parts = lane._started[id(task)]
        assert [f.result(timeout=60) for f in parts]  # done before the lane's thread ran the batch
        assert len(names) == 2 and all(n.startswith("hybridload-gpu-prep") for n in names)
        assert run(task).images.shape == (40, 3, 32, 32) and not lane._started
        assert len(names) == 2  # not prepared a second time
    finally:
        lane.close()


def test_a_bad_sample_in_a_later_part_is_rerouted_naming_it(photo_root, bad_files):
    from hybridload.sources import FileList

    good = sources.ImageFolder(photo_root)
    src = FileList([good.ref(i % len(good)).location for i in range(39)] + [bad_files["text"]], [0] * 40)
    lane = _lane(src, recipe.imagenet_train(32), 4)
    try:
        with pytest.raises(Reroute, match=r"sample 39 \(.*\) is not a JPEG"):
            lane.run_batch(BatchTask(0, 0, np.arange(40)))
    finally:
        lane.close()


def test_same_shape_resizes_are_one_launch_and_the_same_pixels(photo_root, monkeypatch):
    src = sources.ImageFolder(photo_root)
    imgs = [cpu_decode([torch.frombuffer(bytearray(src.read(src.ref(i))[0]), dtype=torch.uint8)])[0] for i in range(6)]
    imgs = [img[:, :40, :60] for img in imgs]  # one shape, as an eval recipe's images of one size
    ops = [
        [torch_ops.Crop(2, 3, 50, 30), torch_ops.Resize(24, 24)] + ([torch_ops.Flip()] if k % 2 else [])
        for k in range(6)
    ]
    same_kinds = [[torch_ops.Crop(2, 3, 50, 30), torch_ops.Resize(24, 24)] for _ in range(6)]
    calls = []
    real = torch_ops.F.interpolate
    monkeypatch.setattr(torch_ops.F, "interpolate", lambda x, **kw: calls.append(x.shape[0]) or real(x, **kw))
    batched = torch_ops.apply_ops_batch(imgs, same_kinds)
    assert calls == [6]  # one launch for the six
    calls.clear()
    alone = [torch_ops.apply_ops(img, o) for img, o in zip(imgs, same_kinds)]
    assert calls == [1] * 6
    assert all(torch.equal(a, b) for a, b in zip(batched, alone))
    mixed = torch_ops.apply_ops_batch(imgs, ops)  # op types differ (flip or not): one by one
    assert all(torch.equal(a, torch_ops.apply_ops(img, o)) for a, img, o in zip(mixed, imgs, ops))


def test_worker_processes_prepare_the_same_batches_as_threads(photo_root):
    """Threads give one core's worth (the preparation holds the GIL); worker processes give cores.
    Same samples, labels, parameters and order either way; a bad kind is named."""
    from hybridload.lanes._gpu.feed import join_batch
    from hybridload.lanes._gpu.prep import PrepPool

    src, rec = sources.ImageFolder(photo_root), recipe.imagenet_train(32)
    task = BatchTask(0, 2, (np.arange(40) * 5) % len(src), seed=3)
    threads, procs = PrepPool(src, rec, 2, "threads"), PrepPool(src, rec, 2, "processes")
    try:
        a, b = join_batch(threads.start(task)), join_batch(procs.start(task))
        assert a.payloads == b.payloads and np.array_equal(a.labels, b.labels)
        assert a.params == b.params and a.sizes == b.sizes
    finally:
        threads.shutdown()
        procs.shutdown()
    with pytest.raises(ValueError, match="prep kind must be one of"):
        PrepPool(src, rec, 2, "fibers")


def test_a_bad_sample_prepared_in_a_worker_process_is_rerouted_naming_it(photo_root, bad_files):
    from hybridload.sources import FileList

    good = sources.ImageFolder(photo_root)
    src = FileList([good.ref(i % len(good)).location for i in range(39)] + [bad_files["text"]], [0] * 40)
    lane = TorchGpuLane(
        src,
        recipe.imagenet_train(32),
        batch_size=40,
        device="cpu",
        decode=cpu_decode,
        gpu_threads=2,
        prep_kind="processes",
    )
    try:
        with pytest.raises(Reroute, match=r"sample 39 \(.*\) is not a JPEG"):
            lane.run_batch(BatchTask(0, 0, np.arange(40)))
    finally:
        lane.close()
