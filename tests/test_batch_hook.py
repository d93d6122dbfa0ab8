"""The device-side batch hook: keyed by (seed, epoch, rank, batch position), so a resume or a
rerun gives the same batches; what it returns is checked, naming batch_transform."""

import hashlib

import pytest
import torch
import torch.nn.functional as F

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.delivery._batch_hook import batch_generator, batch_seed, check_result

from support.resume_helper import check_resume

REC = recipe.imagenet_train(32, normalize=True)
CLASSES = 3


def mixup(images, labels, gen):
    """MixUp with plain torch ops (torchvision does not load on the CPU test box)."""
    lam = torch.rand((), generator=gen, device=images.device)
    perm = torch.randperm(len(images), generator=gen, device=images.device)
    soft = F.one_hot(labels, CLASSES).to(images.dtype)
    return lam * images + (1 - lam) * images[perm], lam * soft + (1 - lam) * soft[perm]


def loader(src, **kw):
    return HybridLoader(
        src, REC, 9, policy=LoaderPolicy(cpu_actors=0, threads=2), seed=2, return_indices=True, device="cpu", **kw
    )


def digest(batch):
    images, labels, indices = batch
    return (
        tuple(indices.tolist()),
        hashlib.md5(images.numpy().tobytes()).hexdigest(),
        hashlib.md5(labels.numpy().tobytes()).hexdigest(),
    )


def test_mixup_hook_gives_the_same_batches_after_a_mid_epoch_resume(photo_root):
    src = sources.ImageFolder(photo_root)
    check_resume(lambda: loader(src, batch_transform=mixup), key=digest, close=lambda ld: ld.close())


def test_the_hook_runs_on_the_normalized_delivered_batch(photo_root):
    src = sources.ImageFolder(photo_root)
    seen = []

    def spy(images, labels, gen):
        seen.append((images.dtype, images.device, gen.device, labels.dtype))
        return mixup(images, labels, gen)

    with loader(src) as plain, loader(src, batch_transform=spy) as hooked:
        a, b = next(iter(plain)), next(iter(hooked))
    assert seen[0] == (torch.float32, torch.device("cpu"), torch.device("cpu"), torch.int64)
    assert torch.equal(a[2], b[2])  # same indices: the hook does not touch the stream
    assert b[1].shape == (9, CLASSES) and torch.allclose(b[1].sum(1), torch.ones(9))  # soft labels
    assert not torch.equal(a[0], b[0])  # images were mixed


def test_the_generator_is_keyed_by_position_epoch_rank_and_seed():
    def draws(*key):
        return torch.rand(4, generator=batch_generator(*key, device=torch.device("cpu"))).tolist()

    assert draws(0, 1, 0, 5) == draws(0, 1, 0, 5)
    others = [draws(0, 1, 0, 6), draws(0, 2, 0, 5), draws(0, 1, 1, 5), draws(7, 1, 0, 5)]
    assert all(o != draws(0, 1, 0, 5) for o in others)
    assert len({batch_seed(0, 0, 0, p) for p in range(1000)}) == 1000


def test_the_loader_hands_each_position_its_own_generator_and_the_same_in_a_rerun(photo_root):
    src = sources.ImageFolder(photo_root)

    def run():
        firsts = []

        def record(images, labels, gen):
            firsts.append(torch.rand((), generator=gen).item())
            return images, labels

        with loader(src, batch_transform=record) as ld:
            ld.set_epoch(1)
            list(ld)
        return firsts

    first, again = run(), run()
    assert first == again and len(first) == 7
    assert len(set(first)) == len(first)  # every position draws differently
    assert first == [
        torch.rand((), generator=batch_generator(2, 1, 0, p, torch.device("cpu"))).item() for p in range(7)
    ]


@pytest.mark.parametrize(
    "bad,msg",
    [
        (lambda im, lab: im, "returned Tensor"),
        (lambda im, lab: (im,), "returned a tuple of 1"),
        (lambda im, lab: (im, lab.tolist()), r"returned \(Tensor, list\)"),
        (lambda im, lab: (im[:-1], lab), "images of shape"),
        (lambda im, lab: (im, lab[0]), "labels of shape"),
    ],
    ids=["tensor", "one-tuple", "list-labels", "short-images", "scalar-label"],
)
def test_a_bad_return_is_an_error_naming_batch_transform(bad, msg):
    images, labels = torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.int64)
    with pytest.raises((TypeError, ValueError), match=msg) as info:
        check_result(bad(images, labels), 4)
    assert "batch_transform" in str(info.value) and "return (images, labels)" in str(info.value)


def test_the_loader_names_batch_transform_and_the_batch_when_the_hook_returns_badly(photo_root):
    def drop_labels(images, labels, gen):
        return images

    with loader(sources.ImageFolder(photo_root), batch_transform=drop_labels) as ld:
        with pytest.raises(TypeError, match=r"batch_transform .*drop_labels \(batch 0 of epoch 0\) returned Tensor"):
            next(iter(ld))


def test_a_batch_transform_that_is_not_callable_is_refused(photo_root):
    with pytest.raises(TypeError, match="batch_transform must be a function fn"):
        loader(sources.ImageFolder(photo_root), batch_transform="mixup")
