"""The drop-in DataLoader's fidelity: torch's worker info and worker_init_fn in the worker,
user errors surfacing once with their traceback, arguments honoured or refused up front."""

import pytest
import torch
from torch.utils.data import Dataset, get_worker_info
from torch.utils.data._utils.collate import default_collate

import hybridload
from hybridload._dataloader.worker import DatasetWorker, UserFailure

SEEN = {}


class Info(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        info = get_worker_info()
        return torch.tensor([info.id, info.num_workers, SEEN.get("init", -1)])


class Broken(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == 4:
            raise KeyError("record 4 is missing")
        return torch.tensor(i)


def init(worker_id):
    SEEN["init"] = 100 + worker_id


def test_get_worker_info_and_worker_init_fn_are_seen_by_getitem_in_the_worker():
    w = DatasetWorker((Info(), default_collate, init), True, 0, worker_id=1, num_workers=3)
    out = w.run([0, 1], seed=7, seq=0)
    assert out.tolist() == [[1, 3, 101], [1, 3, 101]]
    info = get_worker_info()
    assert info.seed == 7 and isinstance(info.dataset, Info)


def test_a_user_error_names_batch_and_sample_with_the_original_traceback():
    import pickle

    w = DatasetWorker((Broken(), default_collate, None), True)
    failure = w.run([3, 4, 5], seed=0, seq=2)  # the batch's outcome: a value, the pass goes on
    assert isinstance(failure, UserFailure)
    again = pickle.loads(pickle.dumps(failure))
    with pytest.raises(KeyError) as got:  # the original class, as torch re-raises it
        again.reraise()
    msg = str(got.value)
    assert "batch 2 (indices [3, 4, 5]), sample 4: dataset[4]" in msg and "KeyError: 'record 4 is missing'" in msg
    assert "raise KeyError" in msg


def test_prefetch_factor_sets_the_window():
    ld = hybridload.DataLoader(Broken(), distribute_mode=True, num_workers=3, prefetch_factor=4)
    assert ld.window == 12


def test_num_workers_beyond_the_free_slots_runs_what_fits_with_one_warning(ray_cluster):
    plain = [b.tolist() for b in hybridload.DataLoader(Broken(), batch_size=3, sampler=[0, 1, 2, 3, 5, 6, 7])]
    with pytest.warns(UserWarning, match="100 workers asked for"):
        with hybridload.DataLoader(
            Broken(), batch_size=3, sampler=[0, 1, 2, 3, 5, 6, 7], distribute_mode=True, num_workers=100
        ) as ld:
            assert [b.tolist() for b in ld] == plain


def test_a_user_error_surfaces_once_not_retried_and_the_pass_goes_on(ray_cluster, caplog):
    with hybridload.DataLoader(Broken(), batch_size=3, distribute_mode=True, num_workers=2) as ld:
        it = iter(ld)
        assert next(it).tolist() == [0, 1, 2]
        with pytest.raises(KeyError, match=r"batch 1 \(indices \[3, 4, 5\]\), sample 4"):
            next(it)
        assert [b.tolist() for b in it] == [[6, 7, 8], [9]]  # as torch: raised once, later batches still come
        assert ld.stats()["retries"] == 0
    assert "carry on" not in caplog.text and "in a row" not in caplog.text


def _actor_names():
    from support.ray_fixtures import alive_actors

    return sorted(alive_actors())


def _wait_for(cond, timeout_s=30.0):
    import time

    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.2)
    return cond()


def test_persistent_workers_true_keeps_the_actors_false_gives_each_pass_its_own(ray_cluster):
    kw = dict(batch_size=5, distribute_mode=True, num_workers=2)
    with hybridload.DataLoader(Broken(), sampler=[0, 1, 2, 3, 5, 6], persistent_workers=True, **kw) as ld:
        list(ld)
        first = _actor_names()
        assert [b.tolist() for b in ld] == [[0, 1, 2, 3, 5], [6]] and _actor_names() == first and len(first) == 2
    assert _wait_for(lambda: _actor_names() == [])
    with hybridload.DataLoader(Broken(), sampler=[0, 1, 2, 3, 5, 6], **kw) as ld:  # persistent_workers=False
        it = iter(ld)
        next(it)
        during = _actor_names()
        assert len(during) == 2
        list(it)  # the pass ends: its actors go, as torch's non-persistent workers do
        assert _wait_for(lambda: _actor_names() == [])
        assert [b.tolist() for b in ld] == [[0, 1, 2, 3, 5], [6]]
    with pytest.raises(ValueError, match="persistent_workers=True needs num_workers > 0"):
        hybridload.DataLoader(Broken(), distribute_mode=True, persistent_workers=True)


def test_a_drop_in_loader_dropped_without_close_logs_no_lane_failures(ray_cluster, caplog):
    import gc
    import logging

    caplog.set_level(logging.INFO, logger="hybridload")
    ld = hybridload.DataLoader(
        Broken(),
        batch_size=1,
        sampler=[0, 1, 2, 3, 5, 6, 7, 8],
        distribute_mode=True,
        num_workers=2,
        persistent_workers=True,
        window=6,
    )
    it = iter(ld)
    next(it)
    del it, ld
    gc.collect()
    assert _wait_for(lambda: _actor_names() == [])
    assert "in a row" not in caplog.text and "handing it on" not in caplog.text and "died" not in caplog.text


def test_in_order_and_pin_memory_device_are_honoured_in_both_modes(ray_cluster, monkeypatch):
    import torch.utils.data._utils.pin_memory as pm

    kw = dict(batch_size=3, sampler=[0, 1, 2, 3, 5, 6, 7], in_order=False)
    plain = [
        b.tolist() for b in hybridload.DataLoader(Broken(), num_workers=2, **kw, multiprocessing_context="forkserver")
    ]  # no fork of a Ray driver
    assert sorted(plain) == [[0, 1, 2], [3, 5, 6], [7]]  # torch's workers: any order allowed
    pinned = []
    # no CUDA here: record torch's pin call (stand-in for torch.cuda, which cannot exist on this box)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(pm, "pin_memory", lambda data, device=None: pinned.append(device) or data)
    with hybridload.DataLoader(
        Broken(), distribute_mode=True, num_workers=2, pin_memory=True, pin_memory_device="cuda:1", **kw
    ) as ld:
        assert [b.tolist() for b in ld] == [[0, 1, 2], [3, 5, 6], [7]]  # sampler order: in_order=False allows more
    assert pinned == ["cuda:1"] * 3


class InitRecorder(Dataset):
    """Reports, for each sample, the worker id it ran as and the id whose worker_init_fn set up
    this copy of the dataset (torch: each worker process its own copy, its own init)."""

    def __init__(self):
        self.inited = None

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor([get_worker_info().id, -1 if self.inited is None else self.inited])


def record_init(worker_id):
    get_worker_info().dataset.inited = worker_id


def test_an_actor_hosting_several_worker_ids_runs_worker_init_fn_for_each_on_its_own_dataset_copy():
    # a pool of 2 actors for num_workers=5: actor 0 hosts ids 0, 2, 4 and actor 1 ids 1, 3
    actors = [
        DatasetWorker((InitRecorder(), default_collate, record_init), True, 5, worker_id=index, num_workers=2)
        for index in (0, 1)
    ]
    seen = {}
    for seq in range(10):  # whichever actor runs a batch, it runs as one of its ids, that id's copy
        out = actors[seq % 2].run([seq], seed=seq, seq=seq)
        worker_id, inited = out[0].tolist()
        assert worker_id == inited and worker_id % 2 == seq % 2
        seen[worker_id] = inited
    assert sorted(seen) == [0, 1, 2, 3, 4]  # every id 0..num_workers-1 was initialised, as torch's workers
    shared = DatasetWorker((InitRecorder(), default_collate, None), True, 5, worker_id=0, num_workers=2)
    assert len({id(dataset) for dataset, _ in shared.hosted.values()}) == 1  # no init: one copy, not one per id


def mark_init(folder, worker_id):
    """worker_init_fn: leaves a file per worker id it ran for (the nodes share this machine's disk)."""
    import os

    open(os.path.join(folder, f"init-{worker_id}-{os.getpid()}"), "w").close()


def test_fewer_cpu_slots_than_num_workers_still_runs_worker_init_fn_for_every_worker_id(ray_cluster, tmp_path):
    import functools
    import os

    with pytest.warns(UserWarning, match="8 workers asked for"):  # the shared cluster has 4 CPUs
        with hybridload.DataLoader(
            Broken(),
            batch_size=1,
            sampler=[0, 1, 2, 3],
            distribute_mode=True,
            num_workers=8,
            worker_init_fn=functools.partial(mark_init, str(tmp_path)),
            persistent_workers=True,
            timeout=120,
        ) as loader:
            assert [b.tolist() for b in loader] == [[0], [1], [2], [3]]

            def ids():
                return sorted(int(name.split("-")[1]) for name in os.listdir(tmp_path))

            assert _wait_for(lambda: ids() == list(range(8)), timeout_s=90), ids()  # every actor started: each id once
            assert len({name.split("-")[2] for name in os.listdir(tmp_path)}) < 8  # in fewer processes than ids


class Draws(Dataset):
    """Each sample: torch's initial seed, a torch number and a ``random`` number."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        import random

        return torch.tensor([float(torch.initial_seed()), float(torch.rand(())), random.random()], dtype=torch.float64)


def seed_torch(worker_id):
    torch.manual_seed(12345)


def test_a_generator_seeded_in_worker_init_fn_runs_on_per_worker_the_others_are_reseeded_per_batch():
    """The user's seed wins for the generator it sets (torch's stream from 12345, batch after
    batch); the generators it leaves alone keep the per-batch seed of the task, so a batch run
    again (another actor, after a loss) draws the same ``random`` numbers."""
    w = DatasetWorker((Draws(), default_collate, seed_torch), True, 2, base_seed=100, worker_id=0, num_workers=2)
    first, second = w.run([0, 1], seed=7, seq=0), w.run([2, 3], seed=9, seq=2)
    assert set(torch.cat([first, second])[:, 0].tolist()) == {12345.0}  # torch's test_worker_init_fn
    want = torch.Generator().manual_seed(12345)
    assert torch.cat([first, second])[:, 1].tolist() == torch.rand(4, generator=want, dtype=torch.float32).tolist()
    again = DatasetWorker((Draws(), default_collate, seed_torch), True, 2, base_seed=55, worker_id=0, num_workers=2)
    assert again.run([2, 3], seed=9, seq=2)[:, 2].tolist() == second[:, 2].tolist()  # random: the task's seed


def note_seeds(worker_id):
    import random

    SEEN["init_seeds"] = (get_worker_info().seed, torch.initial_seed(), random.random())


def test_worker_init_fn_runs_with_torchs_worker_seeds_base_seed_plus_id():
    import random

    DatasetWorker((Draws(), default_collate, note_seeds), True, 2, base_seed=1000, worker_id=1, num_workers=2)
    info_seed, initial, drawn = SEEN["init_seeds"]
    assert info_seed == initial == 1001 and drawn == random.Random(1001).random()  # as torch seeds worker 1
