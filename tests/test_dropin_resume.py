"""The drop-in DataLoader's torchdata-style state_dict with a DistributedBatchSampler: the state
counts the batches the consumer received (not what the workers pulled ahead), any rank loads
rank 0's state at another world size and batch size, and what was delivered before and after
is the epoch, each sample once plus the documented padding.

The ranks here are loaders with explicit ranks in one process, iterated one after the other (the
gloo-process test of the same rules is tests/test_elastic_resume.py, on HybridLoader)."""

import json
from pathlib import Path

import pytest
import torch

import hybridload
from hybridload.sampling import DistributedBatchSampler

N, EPOCH = 37, 2


class Indexed(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return i


def job(world, batch, state=None, limit=None, **kw):
    """Each rank's delivered indices (up to ``limit`` batches) and rank 0's state after them."""
    delivered, states = [], []
    for rank in range(world):
        with hybridload.DataLoader(
            Indexed(), batch_sampler=DistributedBatchSampler(N, batch, seed=3, rank=rank, world_size=world), **kw
        ) as ld:
            if state is not None:
                ld.load_state_dict(state)  # every rank loads rank 0's state
            ld.batch_sampler.set_epoch(EPOCH)
            got = []
            for b in ld:
                got += b.tolist()
                if limit is not None and len(got) == limit * batch:
                    break
            delivered.append(got)
            states.append(ld.state_dict())
    assert len({len(d) for d in delivered}) == 1, "every rank the same number of samples"
    return delivered, states[0]


@pytest.mark.parametrize("workers", [0, 2])
def test_the_dropins_state_resumes_at_one_to_four_ranks_and_back(workers):
    before, state = job(2, 3, limit=2, num_workers=workers)
    assert state["position"] == 2  # what was delivered, not what the workers prefetched
    assert state["delivered"] == 12
    for world in (1, 2, 3, 4):
        after, _ = job(world, 2, state, num_workers=workers)
        seen = [i for part in (before, after) for d in part for i in d]
        left = N - 12
        assert sorted(set(seen)) == list(range(N))
        assert len(seen) - N == -(-left // world) * world - left  # only the documented padding
    at3, state3 = job(3, 2, state, limit=1, num_workers=workers)
    back, _ = job(2, 3, state3, num_workers=workers)
    seen = [i for part in (before, at3, back) for d in part for i in d]
    assert sorted(set(seen)) == list(range(N)) and len(seen) - N < 2


def test_the_dropins_state_on_ray_actors(ray_cluster):
    before, state = job(2, 3, limit=2, distribute_mode=True, num_workers=1)
    assert state["position"] == 2
    after, _ = job(3, 2, state, distribute_mode=True, num_workers=1)
    seen = [i for part in (before, after) for d in part for i in d]
    assert sorted(set(seen)) == list(range(N)) and len(seen) - N == 27 - 25


def test_a_dropin_without_a_stateful_batch_sampler_says_what_to_pass():
    with pytest.raises(TypeError, match="batch_sampler=hybridload.sampling.DistributedBatchSampler"):
        hybridload.DataLoader(Indexed(), batch_size=4).state_dict()


def test_the_batch_sampler_refuses_a_state_missing_seed_or_its_size_as_hybridloader_does():
    from hybridload.errors import ResumeMismatchError

    state = DistributedBatchSampler(N, 3, seed=3).state_dict()
    for key in ("seed", "num_samples", "epoch", "position"):
        partial = {k: v for k, v in state.items() if k != key}
        with pytest.raises(ValueError, match=f"the state lacks {key}; pass the whole dict"):
            DistributedBatchSampler(N, 3, seed=3).load_state_dict(partial)
    with pytest.raises(TypeError, match="seed must be an int"):
        DistributedBatchSampler(N, 3, seed=3).load_state_dict(dict(state, seed="3"))
    with pytest.raises(ResumeMismatchError):  # the drop-in's path: its loader refuses it as the sampler does
        with hybridload.DataLoader(Indexed(), batch_sampler=DistributedBatchSampler(N, 3, seed=3)) as ld:
            ld.load_state_dict(dict(state, seed=4))
    with pytest.raises(ResumeMismatchError):  # and in the wrapped shape drop-in states were saved in before
        with hybridload.DataLoader(Indexed(), batch_sampler=DistributedBatchSampler(N, 3, seed=3)) as ld:
            ld.load_state_dict({"batch_sampler": dict(state, seed=4)})
    with pytest.raises(
        TypeError, match=r"DataLoader.load_state_dict: state must be the dict DataLoader.state_dict\(\)"
    ):
        with hybridload.DataLoader(Indexed(), batch_sampler=DistributedBatchSampler(N, 3, seed=3)) as ld:
            ld.load_state_dict([state])


def test_the_batch_sampler_refuses_a_hybridloader_state_of_another_dataset_size(photo_root):
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources
    from hybridload.errors import ResumeMismatchError

    src = sources.ImageFolder(photo_root)  # 60 samples
    with HybridLoader(
        src, recipe.imagenet_eval(32), 4, policy=LoaderPolicy(mode="cpu", cpu_actors=0), seed=3
    ) as loader:
        saved = loader.state_dict()
    with pytest.raises(ResumeMismatchError, match="num_samples=60 but this one has num_samples=61"):
        DistributedBatchSampler(61, 4, seed=3).load_state_dict(saved)
    same = DistributedBatchSampler(60, 4, seed=3)
    same.load_state_dict(saved)  # the same dataset: a HybridLoader's state resumes the sampler
    assert len(same) == 15


#: a drop-in state in the shape drop-in states were saved in before they took HybridLoader's
#: (``{"batch_sampler": state}``): rank 1 of 2, epoch 2, two batches delivered, N samples in batches of 3
WRAPPED = Path(__file__).parent / "data" / "dropin_state_wrapped.json"


def rank1_loader(**kw):
    return hybridload.DataLoader(
        Indexed(), batch_sampler=DistributedBatchSampler(N, 3, seed=3, rank=1, world_size=2), **kw
    )


def test_the_dropins_state_has_hybridloaders_shape(photo_root):
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources

    src = sources.ImageFolder(photo_root)
    with HybridLoader(src, recipe.imagenet_eval(32), 4, policy=LoaderPolicy(cpu_actors=0), seed=3) as hl:
        loader_state = hl.state_dict()
    with hybridload.DataLoader(Indexed(), batch_sampler=DistributedBatchSampler(len(src), 4, seed=3)) as ld:
        dropin_state = ld.state_dict()
    assert set(dropin_state) == set(loader_state)
    assert dict(dropin_state, source=None) == dict(loader_state, source=None)  # the drop-in knows no source


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dropin_state_saved_in_the_wrapped_shape_loads_and_resumes_at_its_batch(workers):
    wrapped = json.loads(WRAPPED.read_text())
    assert set(wrapped) == {"batch_sampler"}
    with rank1_loader() as ld:  # the run that state was saved from, whole: what follows its second batch
        ld.batch_sampler.set_epoch(wrapped["batch_sampler"]["epoch"])
        whole = [b.tolist() for b in ld]
    with rank1_loader(num_workers=workers) as ld:
        ld.load_state_dict(wrapped)
        assert ld.state_dict() == wrapped["batch_sampler"]  # read as the state it wraps, saved back in one shape
        assert [b.tolist() for b in ld] == whole[2:]
