"""HybridLoader(order="keyed"): the keyed epoch order end to end — the stream follows the
keyed batches (and the keyed shard-aware order with read="shard"), resumes exactly, and a
checkpoint of one order is refused by a loader of the other."""

import hashlib

import pytest

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.errors import OrderMismatchError
from hybridload.sampling import sharding
from hybridload.sampling._keyed_order import KeyedOrder
from hybridload.sampling._keyed_shard_order import KeyedShardOrder

from support.resume_helper import check_resume
from test_shard_streaming import many_shards, shards  # noqa: F401  (fixtures)
from test_tarshards import folder, shard_dir, write_shard  # noqa: F401  (fixtures)

REC = recipe.imagenet_train(48)
POLICY = LoaderPolicy(cpu_actors=0, threads=2)


def indices(loader, epoch):
    loader.set_epoch(epoch)
    return [tuple(b[2].tolist()) for b in loader]


def test_a_keyed_loader_serves_the_keyed_batches_with_their_labels(photo_root):
    src = sources.ImageFolder(photo_root)
    with (
        HybridLoader(
            src, REC, 8, seed=4, order="keyed", return_indices=True, policy=POLICY, rank=1, world_size=2
        ) as ld,
        HybridLoader(src, REC, 8, seed=4, return_indices=True, policy=POLICY, rank=1, world_size=2) as plain,
    ):
        assert ld.order == "keyed" and plain.order == "randperm"
        for epoch in (0, 1):
            ld.set_epoch(epoch)
            got = [(idx.tolist(), lab.tolist()) for _, lab, idx in ld]
            want = KeyedOrder().rank_batches(
                60, batch_size=8, seed=4, epoch=epoch, world_size=2, rank=1, shuffle=True, drop_last=False
            )
            assert [g[0] for g in got] == [b.tolist() for b in want]
            assert all(lab == [src.ref(i).label for i in idx] for idx, lab in got)
            assert len(got) == len(plain) == sharding.num_batches(60, batch_size=8, world_size=2)
        assert indices(ld, 0) != indices(plain, 0)  # another stream: the order is a setting


def test_a_keyed_loader_resumes_exactly(photo_root):
    src = sources.ImageFolder(photo_root)

    def key(batch):
        images, labels, idx = batch
        return (tuple(idx.tolist()), hashlib.md5(images.numpy().tobytes()).hexdigest())

    check_resume(
        lambda: HybridLoader(src, REC, 9, policy=POLICY, seed=2, order="keyed", return_indices=True),
        key=key,
        close=lambda ld: ld.close(),
    )


def test_a_checkpoint_of_one_order_is_refused_by_a_loader_of_the_other(photo_root):
    src = sources.ImageFolder(photo_root)
    with (
        HybridLoader(src, REC, 8, policy=POLICY, order="keyed") as keyed,
        HybridLoader(src, REC, 8, policy=POLICY) as plain,
    ):
        state = keyed.state_dict()
        assert state["order"] == "keyed"
        with pytest.raises(OrderMismatchError, match="order='keyed' but this one has order='randperm'"):
            plain.load_state_dict(state)
        old = plain.state_dict()
        del old["order"]  # saved before the setting existed: torch's order
        plain.load_state_dict(old)
        with pytest.raises(OrderMismatchError):
            keyed.load_state_dict(old)
    with pytest.raises(ValueError, match="order must be 'randperm'"):
        HybridLoader(src, REC, 8, policy=POLICY, order="shuffled")


def test_keyed_shard_streaming_serves_the_keyed_shard_aware_order(many_shards):  # noqa: F811
    src = shards(many_shards, read="shard", buffer_shards=3)
    with HybridLoader(src, REC, 8, seed=7, order="keyed", return_indices=True, policy=POLICY) as ld:
        got = indices(ld, 1)
        want = KeyedShardOrder(src.shard_sizes, 3).rank_indices(
            60, seed=7, epoch=1, world_size=1, rank=0, shuffle=True, drop_last=False
        )
        assert [i for b in got for i in b] == want.tolist()
        assert sorted(want.tolist()) == list(range(60))


class _Billion:
    """10^9 samples in name only: nothing here reads them."""

    def __len__(self):
        return 10**9

    def __getitem__(self, i):
        raise AssertionError("no sample is read")


def test_a_billion_samples_with_the_default_order_are_refused_at_once_naming_keyed():
    """order="randperm" at 10^9 samples gave no first batch in 600 s (a permutation of 10^9);
    refused within seconds, naming what to pass; order="keyed" starts at once."""
    import time

    src, policy = sources.TorchDataset(_Billion()), LoaderPolicy(cpu_actors=0, local_workers="threads")
    t0 = time.monotonic()
    with pytest.raises(
        ValueError, match="1,000,000,000 samples are too many for order='randperm'.*order='keyed'.*read='shard'"
    ):
        HybridLoader(src, recipe.imagenet_eval(32), 256, policy=policy, device="cpu")
    assert time.monotonic() - t0 < 10
    with HybridLoader(src, recipe.imagenet_eval(32), 256, policy=policy, device="cpu", order="keyed") as ld:
        first = ld.batch_indices()[0]
    assert len(first) == 256 and time.monotonic() - t0 < 20
