"""The drop-in DataLoader: Ray actors as workers, the same batches as plain torch."""

import gc
import time

import pytest
import torch
from torch.utils.data import Dataset

import hybridload
from hybridload.errors import BatchTimeoutError

from support.ray_fixtures import alive_actors
from support.waits import wait_until


class Squares(Dataset):
    def __len__(self):
        return 50

    def __getitem__(self, i):
        return torch.full((4,), float(i * i)), i


class Noisy(Dataset):
    """Uses the global RNGs, as augmentations do: the worker seeding decides what comes out."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        return torch.rand(3), i


def collate_pairs(items):
    xs, ys = zip(*items)
    return {"x": torch.stack(xs), "y": torch.tensor(ys)}


def batches(loader):
    return [
        (b["x"].clone(), b["y"].clone()) if isinstance(b, dict) else tuple(torch.as_tensor(t).clone() for t in b)
        for b in loader
    ]


def same(a, b):
    return len(a) == len(b) and all(all(torch.equal(x, y) for x, y in zip(p, q)) for p, q in zip(a, b))


@pytest.mark.parametrize(
    "kw",
    [
        dict(batch_size=8, shuffle=True),
        dict(batch_size=7, shuffle=True, drop_last=True),
        dict(batch_size=6, collate_fn=collate_pairs),
        dict(batch_size=None),
    ],
    ids=["shuffle", "drop_last", "collate_fn", "no-batching"],
)
def test_distribute_mode_true_and_false_yield_the_same_batches(ray_cluster, kw):
    plain = hybridload.DataLoader(Squares(), generator=torch.Generator().manual_seed(3), **kw)
    with hybridload.DataLoader(
        Squares(), generator=torch.Generator().manual_seed(3), distribute_mode=True, num_actors=2, **kw
    ) as ray_loader:
        assert same(batches(plain), batches(ray_loader))
        assert len(ray_loader) == len(plain)


def test_every_batch_gets_its_own_seed_and_reruns_repeat(ray_cluster):
    def run(actors):
        with hybridload.DataLoader(
            Noisy(), batch_size=4, distribute_mode=True, num_actors=actors, generator=torch.Generator().manual_seed(11)
        ) as ld:
            return [x for x, _ in ld]

    first, second = run(2), run(1)  # the rerun on one actor: a batch's numbers follow its seed, not its actor
    assert len(first) == len(second) == 10
    assert all(torch.equal(a, b) for a, b in zip(first, second))  # deterministic for a generator seed
    flat = torch.cat(first)
    assert len(torch.unique(flat, dim=0)) == len(flat)  # no two samples drew the same numbers


class Seeds(Dataset):
    """Each sample: the seed its worker was given (torch's ``get_worker_info().seed``) and its index."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        return torch.tensor([torch.utils.data.get_worker_info().seed, i])


def interleaved(a, b):
    """Batches of two live iterators, taken in turn: ([a's], [b's])."""
    pairs = [(x.clone(), y.clone()) for x, y in zip(a, b)]
    return [x for x, _ in pairs], [y for _, y in pairs]


def test_two_live_iterators_of_a_persistent_loader_keep_their_own_seeds(ray_cluster):
    kw = dict(batch_size=3, shuffle=False)  # a lazy shuffle draws at other moments in torch: only base seeds drawn
    plain = torch.utils.data.DataLoader(
        Seeds(), generator=torch.Generator().manual_seed(5), num_workers=1, multiprocessing_context="forkserver", **kw
    )  # no fork of a Ray driver
    ref = [x.clone() for x in plain]  # torch's iterator draws its base_seed when it is made
    with hybridload.DataLoader(
        Seeds(),
        generator=torch.Generator().manual_seed(5),
        distribute_mode=True,
        num_workers=2,
        persistent_workers=True,
        window=4,
        **kw,
    ) as ld:
        got = interleaved(iter(ld), iter(ld))  # both live: the first's batches are in flight as the second starts
    for p, mine in enumerate(got):
        assert len(mine) == len(ref) == 4
        for k, (g, t) in enumerate(zip(mine, ref)):
            assert torch.equal(g[:, 1], t[:, 1])
            # torch's one worker runs its iterator's batches with base_seed (+ worker id 0); the drop-in gives
            # batch k of pass p base_seed + p * 4 + k: a persistent loader draws its base seed once, as torch's
            # reused iterator does, and each pass has its own seeds
            assert torch.equal(g[:, 0], t[:, 0] + p * 4 + k), (p, k, g[:, 0].tolist(), t[:, 0].tolist())


def test_ddp_style_distributed_sampler_is_respected(ray_cluster):
    from torch.utils.data import DistributedSampler

    seen = []
    for rank in range(2):
        sampler = DistributedSampler(Squares(), num_replicas=2, rank=rank, shuffle=True, seed=1)
        with hybridload.DataLoader(Squares(), batch_size=5, sampler=sampler, distribute_mode=True, num_actors=1) as ld:
            got = torch.cat([y for _, y in ld]).tolist()
        assert got == list(sampler)
        seen += got
    assert sorted(seen) == list(range(50))


def test_close_and_gc_kill_the_actors(ray_cluster):
    ld = hybridload.DataLoader(Squares(), batch_size=10, distribute_mode=True, num_actors=2)
    it = iter(ld)
    next(it)
    assert len(alive_actors()) == 2
    ld.close()
    with pytest.raises(RuntimeError, match=r"close\(\)"):
        next(it)
    ld2 = hybridload.DataLoader(Squares(), batch_size=10, distribute_mode=True, num_actors=1)
    next(iter(ld2))
    del ld2
    gc.collect()
    wait_until(lambda: alive_actors() == [], 30, "the dropped loader's actor killed")


class Counted(torch.utils.data.IterableDataset):
    """An IterableDataset each worker iterates whole (torch's workers each give 0..5)."""

    def __iter__(self):
        return iter(range(6))


LANES = {  # the drop-in's lanes, each on TensorDataset(arange(8)) or Counted, as in issue 45
    "local-workers": dict(num_workers=1, multiprocessing_context="forkserver"),  # torch's own (no fork of Ray)
    "ray-workers": dict(num_workers=1, distribute_mode=True),
    "num_workers-0": dict(num_workers=0, distribute_mode=True),  # a fair share of the cluster's actors
    "iterable-pass": dict(num_workers=2, distribute_mode=True, iterable=True),
    "iterable-in-process": dict(num_workers=0, distribute_mode=True, iterable=True),  # torch's num_workers=0
}


def values(batches) -> list:
    """Every sample of ``batches`` (a TensorDataset's batches are lists of one tensor), as numbers."""
    return [v for b in batches for t in (b if isinstance(b, list) else [b]) for v in t.tolist()]


@pytest.mark.parametrize("lane", list(LANES))
def test_a_loader_nothing_else_holds_lives_as_long_as_its_pass(ray_cluster, lane):
    """``for b in DataLoader(...)``: the pass holds its loader (as torch's iterator does), so the
    loader's finalizer cannot close the pass it runs; dropping both still ends the pass and its actors."""
    kw = dict(LANES[lane])
    dataset = Counted() if kw.pop("iterable", False) else torch.utils.data.TensorDataset(torch.arange(8))
    theirs = {k: v for k, v in kw.items() if k != "distribute_mode"}
    if theirs["num_workers"]:
        theirs["multiprocessing_context"] = "forkserver"  # torch's workers: no fork of a Ray driver
    first = next(iter(hybridload.DataLoader(dataset, batch_size=2, **kw)))  # nothing holds the loader but the pass
    got = [b for b in hybridload.DataLoader(dataset, batch_size=4, **kw)]
    assert values([first]) == values([next(iter(torch.utils.data.DataLoader(dataset, batch_size=2, **theirs)))])
    assert values(got) == values(torch.utils.data.DataLoader(dataset, batch_size=4, **theirs))
    gc.collect()
    wait_until(lambda: alive_actors() == [], 30, "every pass ended: no actor left behind")


class Stuck(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        time.sleep(5 if i == 2 else 0)
        return i


def test_a_late_batch_is_an_error_naming_it_not_a_hang(ray_cluster):
    with hybridload.DataLoader(Stuck(), batch_size=2, timeout=1.0, distribute_mode=True, num_actors=1) as ld:
        it = iter(ld)
        assert next(it).tolist() == [0, 1]
        with pytest.raises(BatchTimeoutError, match="batch 1 did not arrive within 1 s") as got:
            next(it)
    assert str(got.value).startswith("DataLoader timed out after 1 seconds")  # torch's words
    assert "DataLoader(timeout=...)" in str(got.value) and "batch_timeout_s" not in str(got.value)  # its knob


def test_the_drop_ins_trace_holds_each_batch_of_its_ray_pass_once(ray_cluster, tmp_path):
    import json

    path = tmp_path / "dropin.json"
    with hybridload.DataLoader(Squares(), batch_size=8, distribute_mode=True, num_actors=2) as ld:
        with ld.trace(path):
            n = len(batches(ld))
    events = json.loads(path.read_text())["traceEvents"]
    kept = sorted(e["args"]["seq"] for e in events if e["ph"] == "X" and e["cat"] == "work" and e["args"]["kept"])
    assert kept == list(range(n)) and n == 7, kept
    assert [e["args"]["seq"] for e in events if e["name"] == "stall"] == list(range(n))
