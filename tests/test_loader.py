"""HybridLoader on the in-process lane: the stream, determinism, resume, errors, shutdown."""

import gc
import hashlib
import os
import threading
import time

import numpy as np
import pytest
import torch

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import BatchTimeoutError, ResumeMismatchError, SampleError

from support.resume_helper import check_resume
from support.streams import check_the_newer_pass_supersedes_the_older, stream

import test_tarshards

#: the tar source's fixtures, by assignment (an import would need a noqa that `ruff format` moves)
folder, shard_dir = test_tarshards.folder, test_tarshards.shard_dir

REC = recipe.imagenet_train(48)


def inproc(**kw):
    return LoaderPolicy(cpu_actors=0, **kw)


def test_stream_follows_the_batch_plan_with_labels(photo_root):
    src = sources.ImageFolder(photo_root)
    with HybridLoader(src, REC, 8, policy=inproc(threads=2), seed=4, return_indices=True) as ld:
        for epoch in (0, 1):
            ld.set_epoch(epoch)
            got = [(idx.numpy(), lab.numpy(), img) for img, lab, idx in ld]
            plan = ld.batch_indices()
            assert len(got) == len(plan) == len(ld) == 8
            for (idx, lab, img), want in zip(got, plan):
                assert idx.tolist() == want.tolist()
                assert lab.tolist() == [src.ref(i).label for i in want]
                assert img.shape == (len(want), 3, 48, 48) and img.dtype == torch.uint8
            assert sorted(np.concatenate([g[0] for g in got]).tolist()) == list(range(60))


def test_the_share_admission_is_built_once_with_the_lanes_and_kept_for_every_pass(photo_root, monkeypatch):
    import hybridload._loader as loader_module
    from hybridload.execution._admission import ShareAdmission

    built = []

    class Counted(ShareAdmission):
        def __init__(self, *a, **kw):
            built.append(self)
            super().__init__(*a, **kw)

    monkeypatch.setattr(loader_module, "ShareAdmission", Counted)
    with HybridLoader(sources.ImageFolder(photo_root), REC, 30, policy=inproc(threads=1)) as ld:
        assert ld.stats()["plan"]["gpu_share"] == 0.0  # no lane yet: nothing capped, nothing built
        for _ in range(2):
            assert len(list(ld)) == 2
    assert len(built) == 1


def test_stream_identical_whatever_threads_and_window(photo_root):
    src = sources.ImageFolder(photo_root)
    runs = []
    for threads, window in [(1, 1), (2, None), (3, 2), (4, 16)]:
        with HybridLoader(
            src, REC, 7, policy=inproc(threads=threads, window=window), seed=9, return_indices=True
        ) as ld:
            runs.append(stream(ld, epochs=(0, 1)))
    assert all(r == runs[0] for r in runs[1:])
    assert runs[0][:9] != runs[0][9:]  # epochs differ


def test_resume_mid_epoch_and_at_epoch_end_gives_the_uninterrupted_stream(photo_root):
    src = sources.ImageFolder(photo_root)

    def key(batch):
        images, labels, indices = batch
        return (tuple(indices.tolist()), hashlib.md5(images.numpy().tobytes()).hexdigest())

    check_resume(
        lambda: HybridLoader(src, REC, 9, policy=inproc(threads=2), seed=2, return_indices=True),
        key=key,
        close=lambda ld: ld.close(),
    )


def test_load_state_dict_refuses_another_seed_or_dataset(photo_root):
    src = sources.ImageFolder(photo_root)
    with HybridLoader(src, REC, 8, policy=inproc()) as a, HybridLoader(src, REC, 4, policy=inproc(), seed=1) as b:
        with pytest.raises(ResumeMismatchError, match="seed=0 but this one has seed=1"):
            b.load_state_dict(a.state_dict())
        with pytest.raises(ResumeMismatchError, match="num_samples=61 but this one has num_samples=60"):
            b.load_state_dict(dict(a.state_dict(), seed=1, num_samples=61))


def _state_after_one_batch(src):
    with HybridLoader(src, REC, 8, policy=inproc(), seed=3) as ld:
        next(iter(ld))
        return ld.state_dict()


def _resume(src, state):
    with HybridLoader(src, REC, 8, policy=inproc(), seed=3) as ld:
        ld.load_state_dict(state)
        return len(list(ld))


def test_a_state_saved_over_one_image_folder_resumes_only_over_that_folder(photo_root, shard_dir, tmp_path):
    import shutil

    state = _state_after_one_batch(sources.ImageFolder(photo_root))
    moved = shutil.copytree(photo_root, tmp_path / "moved")  # the same tree elsewhere: the same dataset
    assert _resume(sources.ImageFolder(moved), state) == 7
    renamed = shutil.copytree(photo_root, tmp_path / "renamed")  # 60 files still: only num_samples agrees
    os.rename(renamed / "class_002", renamed / "class_zzz")
    other = shutil.copytree(photo_root, tmp_path / "other")
    first = sorted(os.listdir(other / "class_001"))[0]
    os.rename(other / "class_001" / first, other / "class_001" / ("x" + first))
    for src, what in (
        (sources.ImageFolder(renamed), "its classes and relative paths differ"),
        (sources.ImageFolder(other), "its relative paths differ"),
        (sources.FileList(sources.ImageFolder(photo_root).paths), "an ImageFolder then, a FileList now"),
        (sources.TarShards(str(shard_dir / "shard-{000..002}.tar")), "an ImageFolder then, another source now"),
    ):
        with pytest.raises(
            ResumeMismatchError, match=f"saved over another dataset \\({what}\\): source='ImageFolder; "
        ) as info:
            _resume(src, state)
        assert info.value.field == "source"
    assert _resume(sources.ImageFolder(renamed), dict(state, source=None)) == 7  # a state of an older hybridload


def test_a_bad_sample_raises_after_every_earlier_batch_was_delivered(photo_root, bad_files):
    src0 = sources.ImageFolder(photo_root)
    paths = list(src0.paths[:20])
    paths[13] = bad_files["truncated"]
    src = sources.FileList(paths, list(range(20)))
    with HybridLoader(src, REC, 4, policy=inproc(threads=2), shuffle=False) as ld:
        delivered = []
        with pytest.raises(SampleError) as info:
            for images, labels in ld:
                delivered.append(labels.tolist())
        assert delivered == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
        assert (info.value.index, info.value.path, info.value.stage) == (13, bad_files["truncated"], "Decode")
        assert ld.state_dict()["position"] == 3


def test_skip_substitutes_and_counts_in_stats(photo_root, bad_files):
    src0 = sources.ImageFolder(photo_root)
    paths = list(src0.paths[:12])
    paths[5], paths[9] = bad_files["zero"], bad_files["missing"]
    src = sources.FileList(paths, list(range(12)))
    with HybridLoader(src, REC, 4, policy=inproc(on_error="skip"), shuffle=False) as ld:
        batches = list(ld)
        assert len(batches) == 3 and batches[1][0][1].eq(0).all() and batches[2][0][1].eq(0).all()
        st = ld.stats()
        assert st["skipped"] == 2
        assert {(s["index"], s["stage"]) for s in st["skipped_samples"]} == {(5, "Decode"), (9, "read")}


def test_memory_in_flight_is_bounded_by_the_window_when_the_consumer_stops(photo_root):
    src = sources.ImageFolder(photo_root)
    with HybridLoader(src, REC, 2, policy=inproc(threads=2, window=3), shuffle=False) as ld:
        it = iter(ld)
        next(it)
        time.sleep(1.0)  # the consumer stops reading; producers must stop at the window
        st = ld.stats()
        assert st["images"] <= 2 * (1 + 3), st["images"]
        assert it.buffered() <= 3
        assert len(list(it)) == len(ld) - 1


def test_slow_batch_ends_in_a_timeout_naming_it():
    class Slow:
        def __len__(self):
            return 4

        def __getitem__(self, i):
            time.sleep(1.5 if i == 0 else 0)
            return np.zeros((8, 8, 3), np.uint8), i

    ld = HybridLoader(
        sources.TorchDataset(Slow()),
        recipe.Recipe([recipe.Decode(), recipe.CenterCrop(8)]),
        2,
        policy=inproc(threads=1, batch_timeout_s=0.3),
        shuffle=False,
    )
    t0 = time.monotonic()
    with pytest.raises(BatchTimeoutError, match="batch 0 did not arrive within 0.3 s"):
        next(iter(ld))
    assert time.monotonic() - t0 < 1.4
    ld.close()


def _lane_threads():
    return [t for t in threading.enumerate() if t.name.startswith("hybridload-inprocess") and t.is_alive()]


def test_close_and_garbage_collection_leave_no_threads(photo_root):
    src = sources.ImageFolder(photo_root)
    ld = HybridLoader(src, REC, 4, policy=inproc(threads=2))
    next(iter(ld))
    assert _lane_threads()
    ld.close()
    ld.close()  # idempotent
    assert not _lane_threads()
    with pytest.raises(RuntimeError, match="closed"):
        iter(ld)
    ld2 = HybridLoader(src, REC, 4, policy=inproc(threads=2))
    next(iter(ld2))
    del ld2
    deadline = time.monotonic() + 10
    while _lane_threads() and time.monotonic() < deadline:
        gc.collect()  # again each time: a collection running on another thread makes this one return at once
        time.sleep(0.05)
    assert not _lane_threads()


def test_a_new_iterator_supersedes_the_old_one(photo_root):
    src = sources.ImageFolder(photo_root)
    with HybridLoader(src, REC, 4, policy=inproc()) as ld:
        old = iter(ld)
        next(old)
        new = iter(ld)
        with pytest.raises(RuntimeError, match="superseded"):
            next(old)
        assert len(list(new)) == len(ld)


def test_of_two_threads_starting_passes_at_once_the_newer_supersedes_the_older(photo_root):
    """Both got a whole pass (epochs 0 and 1) before, or the older one "superseded" naming nothing."""
    with HybridLoader(sources.ImageFolder(photo_root), recipe.imagenet_eval(16), 6, policy=inproc(threads=2)) as ld:
        check_the_newer_pass_supersedes_the_older(ld, rounds=20)


def test_normalized_output_is_float_on_cpu_device(photo_root):
    src = sources.ImageFolder(photo_root)
    with HybridLoader(src, recipe.imagenet_eval(32, normalize=True), 5, policy=inproc(), device="cpu") as ld:
        images, labels = next(iter(ld))
        assert images.dtype == torch.float32 and images.device.type == "cpu" and labels.dtype == torch.int64


@pytest.mark.parametrize(
    "make,exc,msg",
    [
        (lambda s: HybridLoader(s, REC, 0), ValueError, "batch_size must be a positive int"),
        (lambda s: HybridLoader(s, REC, -3), ValueError, "batch_size must be a positive int"),
        (lambda s: HybridLoader(s, REC, 4, rank=2, world_size=2), ValueError, "rank"),
        (lambda s: HybridLoader("folder", REC, 4), TypeError, "sources.TorchDataset"),
        (lambda s: HybridLoader(s, "imagenet", 4), TypeError, "Recipe"),
        (lambda s: LoaderPolicy(mode="fast"), ValueError, "mode must be one of"),
        (lambda s: LoaderPolicy(on_error="ignore"), ValueError, "on_error"),
        (lambda s: LoaderPolicy(gpu_share=1.5), ValueError, "gpu_share"),
        (lambda s: LoaderPolicy(mode="split"), ValueError, "gpu_share"),
        (lambda s: LoaderPolicy(window=0), ValueError, "window"),
        (lambda s: LoaderPolicy(placement="near"), ValueError, "placement"),
    ],
)
def test_bad_configuration_gets_a_clear_error(photo_root, make, exc, msg):
    with pytest.raises(exc, match=msg):
        make(sources.ImageFolder(photo_root))


def test_empty_or_missing_folders_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        sources.ImageFolder(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no class folders"):
        sources.ImageFolder(tmp_path)
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "notes.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match="no image files"):
        sources.ImageFolder(tmp_path)


@pytest.mark.parametrize("default", [False, True], ids=["threads", "LoaderPolicy()"])
def test_a_pass_without_set_epoch_reshuffles_and_set_epoch_wins(photo_root, default, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # the literal default: one machine, no cluster configured
    src = sources.ImageFolder(photo_root)
    policy = LoaderPolicy() if default else inproc(threads=2)
    with HybridLoader(src, REC, 8, policy=policy, seed=1, return_indices=True) as ld:
        first, second = stream_pass(ld), stream_pass(ld)
        assert first != second and ld.epoch == 1
        assert ("worker processes" in ld.describe_lanes()) == default  # the default here: the process lane
        ld.set_epoch(5)
        five = stream_pass(ld)
        ld.set_epoch(5)
        assert stream_pass(ld) == five and ld.epoch == 5
        assert [i.tolist() for i in ld.batch_indices(5)] == [list(b) for b in five]


def stream_pass(ld):
    return [tuple(idx.tolist()) for _img, _lab, idx in ld]
