"""sources.Mix end to end: its arguments checked, the mixed stream the same on every lane
(threads, processes, DALI's CPU-only stand-in for the GPU lane), exact resume at another world
size through the loader, a state of other weights refused by name, stats per source."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter

import numpy as np
import pytest

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import ResumeMismatchError
from hybridload.sources import Mix

from support.resume_helper import check_resume
from test_shard_streaming import many_shards, shards  # noqa: F401  (fixtures)
from test_tarshards import folder  # noqa: F401  (fixture)

REC = recipe.imagenet_train(40)


def photos(root):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".jpg"))


def mixture(photo_root, weights=(0.6, 0.4), epoch_length=45, **kw):
    folder_src = sources.ImageFolder(photo_root)
    extra = sources.FileList(photos(photo_root)[:20], [7] * 20)
    return Mix(
        [(folder_src, weights[0]), (extra, weights[1])], epoch_length=epoch_length, names=["folder", "extra"], **kw
    )


def digest(batch, pixels=True):
    images, labels, idx = batch
    h = hashlib.md5(images.numpy().tobytes()).hexdigest() if pixels else ""
    return (tuple(idx.tolist()), tuple(labels.tolist()), h)


def run(mix, policy, epochs=(0, 1), pixels=True, **kw):
    with HybridLoader(mix, REC, 6, seed=9, order="keyed", return_indices=True, device="cpu", policy=policy, **kw) as ld:
        out = []
        for e in epochs:
            ld.set_epoch(e)
            out += [digest(b, pixels) for b in ld]
        return out, ld.stats()


def test_mix_arguments_are_checked_naming_the_source_and_what_to_write(photo_root):
    src = sources.ImageFolder(photo_root)
    with pytest.raises(ValueError, match=r"non-empty list of \(source, weight\) pairs"):
        Mix([])
    with pytest.raises(ValueError, match="entry 1 must be a \\(source, weight\\) pair"):
        Mix([(src, 1.0), src])
    for bad in (0, -1.0, float("nan"), True, "0.5"):
        with pytest.raises(ValueError, match="source 0's weight must be a finite number > 0"):
            Mix([(src, bad)])
    with pytest.raises(
        ValueError, match="source 0:ImageFolder holds 60 samples but its weight gives it 90.*repeat=True"
    ):
        Mix([(src, 0.75), (src, 0.25)], epoch_length=120)
    with pytest.raises(ValueError, match="gets 0 of the epoch's 10 positions"):
        Mix([(src, 1.0), (src, 0.01)], epoch_length=10)
    with pytest.raises(ValueError, match="epoch_length must be an int >= 1"):
        Mix([(src, 1.0)], epoch_length=0)
    with pytest.raises(ValueError, match="names must be 2 distinct strings"):
        Mix([(src, 1.0), (src, 1.0)], names=["a", "a"])
    with pytest.raises(ValueError, match="pass order='keyed'"):
        HybridLoader(Mix([(src, 1.0)]), REC, 4, policy=LoaderPolicy(cpu_actors=0, threads=1))


def test_a_mix_reads_each_sample_from_its_source_with_its_label(photo_root):
    mix = mixture(photo_root)
    assert len(mix) == 45 and mix.quotas == (27, 18) and mix.offsets == [0, 60]
    ref = mix.ref(65)
    assert ref.index == 65 and ref.label == 7 and ref.location == photos(photo_root)[5]
    assert mix.read(ref)[0] == open(photos(photo_root)[5], "rb").read()
    refs = [mix.ref(i) for i in (61, 3, 62, 4)]
    reads = mix.read_many(refs)
    assert [label for _, label in reads] == [7, mix.sources[0].ref(3).label, 7, mix.sources[0].ref(4).label]
    with pytest.raises(IndexError, match="out of range for 80 samples"):
        mix.ref(80)


def test_the_mixed_stream_is_the_same_on_threads_processes_and_the_dali_stand_in(photo_root):
    mix = mixture(photo_root)
    threads, stats = run(mix, LoaderPolicy(cpu_actors=0, local_workers="threads", threads=2))
    processes, _ = run(mix, LoaderPolicy(cpu_actors=0, local_workers="processes", threads=2))
    assert processes == threads  # pixels too: the CPU lanes are bit-identical
    dali, _ = run(mix, LoaderPolicy(mode="gpu", cpu_actors=0, threads=1), pixels=False)
    assert dali == [(i, lab, "") for i, lab, _ in threads]
    order = mix.sample_order()
    for e in (0, 1):
        want = order.positions(np.arange(45), seed=9, epoch=e, shuffle=True).tolist()
        assert [i for d in threads[8 * e : 8 * e + 8] for i in d[0]] == want
    assert stats["sources"] == {"folder": 54, "extra": 36}  # two epochs of 27 and 18


def test_a_mix_loader_resumes_exactly(photo_root):
    mix = mixture(photo_root)
    check_resume(
        lambda: HybridLoader(
            mix, REC, 7, seed=2, order="keyed", return_indices=True, policy=LoaderPolicy(cpu_actors=0, threads=2)
        ),
        key=digest,
        close=lambda ld: ld.close(),
    )


def test_a_mix_loader_state_at_two_ranks_resumes_at_three_with_each_position_once(photo_root):
    mix = mixture(photo_root, epoch_length=48)
    policy = LoaderPolicy(cpu_actors=0, threads=1)
    full = Counter(
        i
        for b in mix.sample_order().rank_batches(
            48, batch_size=48, seed=9, epoch=0, world_size=1, rank=0, shuffle=True, drop_last=False
        )
        for i in b.tolist()
    )
    head, state = [], None
    for r in range(2):
        with HybridLoader(
            mix, REC, 4, seed=9, order="keyed", return_indices=True, policy=policy, rank=r, world_size=2
        ) as ld:
            it = iter(ld)
            head += [i for _ in range(3) for i in next(it)[2].tolist()]
            state = json.loads(json.dumps(ld.state_dict()))
    rest = []
    for r in range(3):
        with HybridLoader(
            mix, REC, 5, seed=9, order="keyed", return_indices=True, policy=policy, rank=r, world_size=3
        ) as ld:
            ld.load_state_dict(state)
            rest += [i for b in ld for i in b[2].tolist()]
    got = Counter(head + rest)
    assert not full - got and sum((got - full).values()) < 3


def test_a_mix_loader_refuses_a_state_of_other_weights_naming_weights(photo_root):
    policy = LoaderPolicy(cpu_actors=0, threads=1)
    with HybridLoader(mixture(photo_root), REC, 4, order="keyed", policy=policy) as ld:
        state = ld.state_dict()
    assert state["mixture"]["weights"] == [0.6, 0.4]
    with HybridLoader(mixture(photo_root, weights=(0.7, 0.3)), REC, 4, order="keyed", policy=policy) as other:
        with pytest.raises(ResumeMismatchError, match=r"weights=\[0.6, 0.4\] but this one has weights=\[0.7, 0.3\]"):
            other.load_state_dict(state)


def test_a_mix_with_a_shard_streamed_source_serves_the_mixture_order(photo_root, many_shards):  # noqa: F811
    tar = shards(many_shards, read="shard", buffer_shards=3)
    mix = Mix([(tar, 2), (sources.ImageFolder(photo_root), 1)], epoch_length=90)
    with HybridLoader(
        mix, REC, 8, seed=3, order="keyed", return_indices=True, policy=LoaderPolicy(cpu_actors=0, threads=2)
    ) as ld:
        got = [i for b in ld for i in b[2].tolist()]
        assert got == mix.sample_order().positions(np.arange(90), seed=3, epoch=0, shuffle=True).tolist()
        assert ld.stats()["sources"] == {"0:TarShards": 60, "1:ImageFolder": 30}
        ld.reset_stats()
        assert ld.stats()["sources"] == {"0:TarShards": 0, "1:ImageFolder": 0}


def test_a_weighted_source_draws_the_same_stream_on_threads_and_processes_never_a_zero_weight(photo_root):
    folder_src = sources.ImageFolder(photo_root)
    weights = [0.0 if folder_src.ref(i).label == 0 else 1.0 for i in range(len(folder_src))]
    src = sources.Weighted(folder_src, weights, num_samples=30)
    threads, _ = run(src, LoaderPolicy(cpu_actors=0, local_workers="threads", threads=2))
    processes, _ = run(src, LoaderPolicy(cpu_actors=0, local_workers="processes", threads=2))
    assert processes == threads and sum(len(d[0]) for d in threads) == 60
    assert all(lab != 0 for d in threads for lab in d[1])  # class 0 weighs nothing: never drawn


def balance(folder_src):
    """Class-balancing weights of a folder: one over the class's count, per sample."""
    labels = np.array([folder_src.ref(i).label for i in range(len(folder_src))])
    counts = np.bincount(labels)
    return 1.0 / counts[labels]


def test_sample_weights_on_the_loader_draw_the_stream_of_sources_weighted_as_array_or_callable(photo_root):
    folder_src = sources.ImageFolder(photo_root)
    w = balance(folder_src)
    policy = LoaderPolicy(cpu_actors=0, threads=2)
    want, _ = run(sources.Weighted(folder_src, w, num_samples=30), policy)
    held, _ = run(folder_src, policy, sample_weights=w, num_samples=30)
    given, _ = run(folder_src, policy, sample_weights=lambda idx: w[idx], num_samples=30)
    assert held == want and given == want and sum(len(d[0]) for d in want) == 60
    with HybridLoader(folder_src, REC, 8, order="keyed", sample_weights=w, policy=policy) as ld:
        assert len(ld) * 8 >= len(folder_src) > (len(ld) - 1) * 8  # num_samples: the source's samples by default


def test_sample_weights_on_the_loader_resume_mid_epoch_and_refuse_other_weights_by_name(photo_root):
    folder_src = sources.ImageFolder(photo_root)
    w = balance(folder_src)
    policy = LoaderPolicy(cpu_actors=0, threads=2)

    def loader(weights):
        return HybridLoader(
            folder_src, REC, 5, seed=4, order="keyed", return_indices=True, policy=policy,
            sample_weights=weights, num_samples=17,
        )  # fmt: skip

    check_resume(lambda: loader(lambda idx: w[idx]), key=digest, close=lambda ld: ld.close())
    with loader(w) as ld:
        next(iter(ld))
        state = json.loads(json.dumps(ld.state_dict()))
    with loader(lambda idx: w[idx]) as same:  # the same weights as a callable: the same state
        same.load_state_dict(state)
    other = w.copy()
    other[0] *= 2
    with loader(other) as ld, pytest.raises(ResumeMismatchError, match="sample_weights"):
        ld.load_state_dict(state)


def test_sample_weights_on_the_loader_are_checked_naming_the_argument(photo_root):
    folder_src = sources.ImageFolder(photo_root)
    n = len(folder_src)

    def build(**kw):
        return HybridLoader(folder_src, REC, 4, **{"order": "keyed", **kw})

    with pytest.raises(ValueError, match=f"HybridLoader: sample_weights: 2 weights for {n} samples"):
        build(sample_weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="HybridLoader: sample_weights: sample 1's weight is nan"):
        build(sample_weights=[1.0, float("nan")] + [1.0] * (n - 2))
    with pytest.raises(ValueError, match="HybridLoader: sample_weights: the callable returned 0 weights"):
        build(sample_weights=lambda idx: [])
    with pytest.raises(ValueError, match="HybridLoader: num_samples must be an int >= 1"):
        build(sample_weights=np.ones(n), num_samples=0)
    with pytest.raises(
        ValueError, match="num_samples=10 is the draws per epoch of sample_weights; pass sample_weights"
    ):
        build(num_samples=10)
    with pytest.raises(ValueError, match="sample_weights draws each sample keyed .* pass order='keyed'"):
        build(sample_weights=np.ones(n), order="randperm")
    with pytest.raises(ValueError, match="sample_weights over a Mix source"):
        HybridLoader(mixture(photo_root), REC, 4, order="keyed", sample_weights=np.ones(45))
