"""The differential tests: the drop-in against torch's own DataLoader on the same arguments: what a loop sees (values,
order, types, exception classes) compared item by item, torch's worker processes beside the
drop-in's Ray actors (the shared 3-node loopback cluster).

torch's workers start from a forkserver here: a worker forked from this process (connected to
Ray) inherits its Ray connection, and such children crash the raylet when they exit (seen:
``HandleFreeLocalObjects`` in the raylet, then every actor gone)."""

import importlib
import logging
import multiprocessing
import re
import textwrap
import typing
import warnings

import pytest
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

import hybridload

FORKSERVER = multiprocessing.get_context("forkserver")
FORKSERVER.set_forkserver_preload(["torch", __name__])  # each torch worker forks with these imported


@pytest.fixture
def torch_looks_at_its_workers_often(monkeypatch):
    """torch's iterator sees a worker gone only when a read of its queue times out, every
    ``MP_STATUS_CHECK_INTERVAL`` (5 s; a forkserver's worker is no child of this process, so no
    SIGCHLD tells it sooner), and joins each worker as long at shutdown before it terminates it:
    every 0.5 s here, in this process only. The same checks, the same RuntimeError, sooner."""
    from torch.utils.data import _utils, dataloader

    monkeypatch.setattr(_utils, "MP_STATUS_CHECK_INTERVAL", 0.5)
    monkeypatch.setattr(dataloader._MultiProcessingDataLoaderIter._try_get_data, "__defaults__", (0.5,))


def plain(x):
    """A batch as comparable data: tensors as (dtype, values), containers kept by type."""
    if isinstance(x, torch.Tensor):
        return ("tensor", str(x.dtype), x.tolist())
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [plain(v) for v in x])
    if isinstance(x, dict):
        return ("dict", {k: plain(v) for k, v in x.items()})
    return (type(x).__name__, x)


def outcomes(loader, limit: int = 60) -> list:
    """What a loop that catches and goes on sees: ("batch", data) or ("error", class, message)."""
    out, it = [], iter(loader)
    for _ in range(limit):
        try:
            b = next(it)
        except StopIteration:
            break
        except Exception as exc:
            out.append(("error", type(exc), str(exc)))
            continue
        out.append(("batch", plain(b)))
    return out


def same_outcomes(mine: list, torchs: list) -> None:
    """Batches equal; errors of the same class (torch's RuntimeError fallback: any RuntimeError)."""
    assert [o[0] for o in mine] == [o[0] for o in torchs], (mine, torchs)
    for m, t in zip(mine, torchs):
        if m[0] == "batch":
            assert m == t
        else:
            assert m[1] is t[1] or (t[1] is RuntimeError and issubclass(m[1], RuntimeError)), (m, t)


def both(dataset, seed=None, **kw):
    """torch's DataLoader and the drop-in on Ray actors, on the same arguments (each its own
    generator seeded ``seed``, when given)."""
    gen = (lambda: torch.Generator().manual_seed(seed)) if seed is not None else (lambda: None)
    return (
        torch.utils.data.DataLoader(dataset, generator=gen(), multiprocessing_context=FORKSERVER, **kw),
        hybridload.DataLoader(dataset, distribute_mode=True, generator=gen(), **kw),
    )


class Batched(Dataset):
    """A dataset that fetches a batch in one call (Hugging Face datasets, torch's Subset)."""

    def __len__(self):
        return 10

    def __getitem__(self, i):
        return torch.tensor([i, 0])

    def __getitems__(self, indices):
        return [torch.tensor([i, 1]) for i in indices]


def test_a_dataset_with_getitems_is_fetched_a_batch_per_call_as_torch_does(ray_cluster):
    theirs, mine = both(Batched(), batch_size=4, num_workers=2)
    with mine:
        got = outcomes(mine)
    want = outcomes(theirs)
    same_outcomes(got, want)
    assert all(row[1] == 1 for o in got for row in o[1][2])  # every sample came through __getitems__


EXTRA_MODULE = textwrap.dedent("""
    import torch
    from torch.utils.data import Dataset

    SCALE = 3

    class Scaled(Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            return torch.tensor([i * SCALE])

    def collate(samples):
        return torch.cat(samples) + 1000
""")


def test_a_dataset_from_a_folder_the_script_put_on_sys_path_reaches_the_actors(
    ray_cluster, tmp_path, monkeypatch, caplog
):
    """The script's folder of helpers on sys.path (not on the Ray workers' path): torch's workers
    import the module; the drop-in ships it by value instead of losing every actor."""
    from hybridload.raycluster._shipping import importable_by_workers, worker_search_path

    (tmp_path / "parity_extra_mod.py").write_text(EXTRA_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("parity_extra_mod")
    assert not importable_by_workers("parity_extra_mod", worker_search_path())  # the case, as the workers see it
    assert importable_by_workers("hybridload", worker_search_path())  # the library itself goes by reference
    theirs, mine = both(mod.Scaled(), batch_size=4, num_workers=2, collate_fn=mod.collate)
    with caplog.at_level(logging.INFO, logger="hybridload.raycluster._shipping"), mine:
        got = outcomes(mine)
    want = outcomes(theirs)
    same_outcomes(got, want)
    assert [o[1] for o in got] == [
        ("tensor", "torch.int64", [1000, 1003, 1006, 1009]),
        ("tensor", "torch.int64", [1012, 1015]),
    ]
    assert "'parity_extra_mod' is not importable by the Ray workers" in caplog.text


class Unbuildable(Exception):
    def __init__(self, code, detail):
        super().__init__(f"{code}: {detail}")


class Faulty(Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        if i == 4:
            raise KeyError("record 4 is missing")
        if i == 7:
            raise Unbuildable(7, "two arguments: torch cannot rebuild it from one message")
        return torch.tensor(i)


def collate_refusing_ten(samples):
    if any(int(s) == 10 for s in samples):
        raise ValueError("sample 10 has no label")
    return torch.stack(samples)


def test_user_errors_keep_their_class_name_the_batch_and_the_pass_goes_on_as_in_torch(ray_cluster):
    theirs, mine = both(Faulty(), batch_size=3, num_workers=2, collate_fn=collate_refusing_ten)
    with mine:
        got = outcomes(mine)
    want = outcomes(theirs)
    same_outcomes(got, want)
    assert [o[1] if o[0] == "error" else "batch" for o in got] == [
        "batch",
        KeyError,
        hybridload.errors.UserCodeError,
        ValueError,
    ]  # 12 samples, 4 batches, 3 raise
    key_msg = got[1][2]
    assert "Caught KeyError in DataLoader worker" in key_msg and "raise KeyError" in key_msg  # worker's traceback
    assert "batch 1 (indices [3, 4, 5]), sample 4: dataset[4]" in key_msg
    assert "batch 3 (indices [9, 10, 11]): collate_fn" in got[3][2]


def init_refusing(worker_id):
    raise ValueError(f"worker {worker_id} has no shard")


def test_an_error_in_worker_init_fn_keeps_its_class_at_the_first_batch_as_in_torch(ray_cluster):
    import gc
    import time

    from support.ray_fixtures import alive_actors

    theirs, mine = both(Faulty(), batch_size=2, num_workers=2, worker_init_fn=init_refusing)
    with mine:
        gc.disable()  # the failed pool's handles may sit in a reference cycle: its actors must go without GC
        try:
            it = iter(mine)  # as torch: creating the iterator does not raise
            deadline = time.monotonic() + 20
            while alive_actors() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert alive_actors() == []  # the actors whose start failed were killed, their CPUs free
        finally:
            gc.enable()
        mine_all = outcomes(it)
    theirs_all = outcomes(theirs)
    assert [o[0] for o in mine_all] == [o[0] for o in theirs_all] == ["error"] * 6  # every batch raises, in both
    assert [o[1] for o in theirs_all[:2]] == [ValueError] * 2  # torch: each worker's first batch: the init error,
    assert {o[1] for o in theirs_all[2:]} == {UnboundLocalError}  # then its own UnboundLocalError (no fetcher)
    assert {o[1] for o in mine_all} == {ValueError}  # the drop-in: the init error each time (docs/guide/dropin.md)
    assert "has no shard" in mine_all[0][2] and "worker_init_fn" in mine_all[0][2]


class Marked(Dataset):
    """A dataset whose worker_init_fn is its own method (torch: sets the worker's copy)."""

    def __init__(self):
        self.worker_id = -1

    def init(self, worker_id):
        self.worker_id = worker_id

    def __len__(self):
        return 8

    def __getitem__(self, i):
        info = get_worker_info()
        return torch.tensor([i, self.worker_id, info.id, info.num_workers])


def test_worker_init_fn_bound_to_the_dataset_and_worker_info_are_as_in_torch(ray_cluster):
    ds = Marked()
    theirs, mine = both(ds, batch_size=2, num_workers=2, worker_init_fn=ds.init)
    with mine:
        got = [b for b in mine]
    want = [b for b in theirs]
    for batches in (got, want):
        rows = torch.cat(batches)
        assert rows[:, 0].tolist() == list(range(8))
        assert torch.equal(rows[:, 1], rows[:, 2])  # the init set the dataset the worker reads
        assert set(rows[:, 3].tolist()) == {2}  # num_workers: what was asked
    assert ds.worker_id == -1  # the driver's dataset is untouched, in both


def test_worker_info_reports_the_workers_asked_when_fewer_actors_run(ray_cluster):
    """torch's get_worker_info().num_workers is the num_workers given; one actor running three
    workers' worth of batches reports 3 too (the other case, 2 actors for 2, is above), and runs
    as each of the three ids, each on the dataset copy its worker_init_fn set up."""
    ds = Marked()
    with hybridload.DataLoader(
        ds, batch_size=2, num_workers=3, num_actors=1, distribute_mode=True, worker_init_fn=ds.init
    ) as mine:
        rows = torch.cat(list(mine))
    assert rows[:, 0].tolist() == list(range(8)) and set(rows[:, 3].tolist()) == {3}
    assert set(rows[:, 2].tolist()) == {0, 1, 2}  # the one actor hosts every worker id, as torch's 3 workers
    assert torch.equal(rows[:, 1], rows[:, 2])  # each id's own dataset copy, set up by worker_init_fn(id)


def test_named_errors_are_runtime_errors_where_torch_raises_runtime_error():
    from hybridload.errors import BatchTimeoutError, UserCodeError, WorkerLost

    assert all(issubclass(c, RuntimeError) for c in (BatchTimeoutError, WorkerLost, UserCodeError))


def test_the_drop_in_is_generic_as_torchs_dataloader():
    alias, torchs = hybridload.DataLoader[torch.Tensor], torch.utils.data.DataLoader[torch.Tensor]
    assert typing.get_origin(alias) is hybridload.DataLoader and typing.get_args(alias) == typing.get_args(torchs)
    assert typing.get_origin(torchs) is torch.utils.data.DataLoader

    def train(loader: "hybridload.DataLoader[torch.Tensor]") -> None: ...

    assert typing.get_type_hints(train, globals())["loader"] == alias


class Defaults(hybridload.DataLoader):
    """A project's loader that only sets defaults (the way a code base swaps its loaders)."""

    def __init__(self, *a, **k):
        k.setdefault("distribute_mode", True)
        super().__init__(*a, **k)


def test_a_subclass_that_sets_defaults_stays_subscriptable_where_the_code_annotated_torchs_loader():
    """torch's own test_typing writes ``DataLoader[List[Tensor]]`` of whatever ``DataLoader`` is:
    a subclass swapped in by that name must take the annotation (typing's own alias where the
    subclass is generic itself)."""
    alias = Defaults[typing.List[torch.Tensor]]
    assert typing.get_origin(alias) is Defaults and typing.get_args(alias) == (typing.List[torch.Tensor],)

    class Typed(hybridload.DataLoader[typing.Any]):
        pass

    assert typing.get_origin(hybridload.DataLoader[int]) is hybridload.DataLoader
    with pytest.raises(TypeError):
        hybridload.DataLoader[int, str]  # typing's check of a generic class's arity holds


def test_num_workers_checks_and_warnings_are_torchs():
    for kw in (dict(), dict(distribute_mode=True)):
        with pytest.raises(ValueError) as mine:
            hybridload.DataLoader(Faulty(), num_workers=-1, **kw)
        with pytest.raises(ValueError) as theirs:
            torch.utils.data.DataLoader(Faulty(), num_workers=-1)
        assert str(mine.value) == str(theirs.value)
    with warnings.catch_warnings(record=True) as want:
        warnings.simplefilter("always")
        torch.utils.data.DataLoader(Faulty(), num_workers=1000)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        ld = hybridload.DataLoader(Faulty(), num_workers=1000, distribute_mode=True)
    assert [str(w.message) for w in got] == [str(w.message) for w in want] and "1000 worker" in str(want[0].message)
    assert ld.num_workers == 1000


@pytest.mark.parametrize(
    "num_workers, context",
    [(0, "fork"), (0, "spawn"), (2, "bad"), (2, object()), (0, object()), (2, 3), (2, "spawn"), (2, FORKSERVER)],
    ids=["fork-0", "spawn-0", "bad-name", "object", "object-0", "number", "spawn", "context"],
)
def test_multiprocessing_context_is_refused_where_torch_refuses_it_with_torchs_class(num_workers, context):
    theirs, mine = context_refusals(num_workers, context)
    assert mine[0] is theirs[0], (mine, theirs)  # None (accepted), ValueError or TypeError, as torch
    assert mine[0] is None or "multiprocessing_context" in mine[1]  # the argument named


@pytest.mark.parametrize(
    "num_workers, context",
    [(0, "fork"), (2, "bad"), (2, object()), (2, 3)],
    ids=["fork-0", "bad-name", "object", "number"],
)
def test_multiprocessing_context_refusal_says_torchs_words(num_workers, context):
    """Scripts and torch's own tests match torch's message (``assertRaisesRegex``): its words up
    to "but got" stand in the drop-in's message."""
    theirs, mine = context_refusals(num_workers, context)
    assert theirs[0] is not None and theirs[1].split("but got")[0] in mine[1], (mine, theirs)


def context_refusals(num_workers, context) -> tuple:
    """(class, message) of what torch's loader and the drop-in on Ray workers raise for
    ``multiprocessing_context=context`` ((None, "") where it is accepted)."""

    def made(cls, **kw):
        try:
            cls(Faulty(), num_workers=num_workers, multiprocessing_context=context, **kw)
        except Exception as exc:
            return type(exc), str(exc)
        return None, ""

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the drop-in says once that it ignores an accepted context
        return made(torch.utils.data.DataLoader), made(hybridload.DataLoader, distribute_mode=True)


class Counting(IterableDataset):
    """torch's CountingIterableDataset: every worker iterates it whole (n samples each)."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n


def length_warnings(caught) -> int:
    return sum("samples have been fetched" in str(w.message) for w in caught)


@pytest.mark.parametrize("persistent", [False, True], ids=["fresh", "persistent"])
def test_a_second_live_iterator_of_an_iterable_dataset_gives_torchs_stream_and_length_warning(ray_cluster, persistent):
    """torch's test_iterable_style_dataset: 4 workers each give the 20 samples (no warning before
    len(dataloader) is read), then a second iterator, made while the first lives, gives all 80 and
    warns at each batch past len(dataloader). The first pass holds every CPU of the cluster."""

    def run(loader):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = iter(loader)
            head = [int(next(first)) for _ in range(40)]
            before = length_warnings(caught)
            assert len(loader) == 20
            second = iter(loader)  # the first still lives
            rest = [int(b) for b in second]
        return head, before, rest, length_warnings(caught)

    kw = dict(num_workers=4, persistent_workers=persistent, timeout=120)
    want = run(torch.utils.data.DataLoader(Counting(20), multiprocessing_context=FORKSERVER, **kw))
    with hybridload.DataLoader(Counting(20), distribute_mode=True, **kw) as mine:
        got = run(mine)
    assert want[1] == 0 and len(want[2]) == 80 and want[3] == 60  # torch's, for the record
    assert got == want  # the samples in torch's order, no warning before len(), one per batch past it


def test_a_persistent_loaders_second_epoch_comes_in_torchs_order(ray_cluster):
    kw = dict(batch_size=4, shuffle=True)

    def epochs(cls, **more):
        ld = cls(range(16), generator=torch.Generator().manual_seed(7), **{"num_workers": 2, **kw, **more})
        try:
            return [torch.cat(list(ld)).tolist() for _ in range(2)]
        finally:
            getattr(ld, "close", lambda: None)()

    persistent = epochs(torch.utils.data.DataLoader, persistent_workers=True, multiprocessing_context=FORKSERVER)
    fresh = epochs(torch.utils.data.DataLoader, num_workers=0)  # the same draws as with workers, without them
    assert persistent[0] == fresh[0] and persistent[1] != fresh[1]  # torch's own difference, for this seed
    assert epochs(hybridload.DataLoader, persistent_workers=True, distribute_mode=True) == persistent
    assert epochs(hybridload.DataLoader, distribute_mode=True) == fresh


class Shards(IterableDataset):
    """Each worker yields its own shard (uneven lengths) with numbers from the global RNGs;
    worker 1's shard breaks at its fifth item (a KeyError: raised once, that worker then ends)."""

    def __iter__(self):
        info = get_worker_info()
        w = info.id if info else 0
        for j in range(5 + 3 * w):
            if w == 1 and j == 4:
                raise KeyError(f"item {j} of worker 1 is missing")
            yield torch.tensor([w * 100 + j, info.seed % 1000 if info else 0]), torch.rand(2)


@pytest.mark.parametrize(
    "kw",
    [dict(batch_size=4), dict(batch_size=None), dict(batch_size=4, drop_last=True)],
    ids=["batched", "unbatched", "drop_last"],
)
def test_an_iterable_dataset_runs_on_actors_as_torch_runs_it_on_workers(ray_cluster, kw):
    theirs, mine = both(Shards(), num_workers=2, seed=1, **kw)
    with mine:
        got = outcomes(mine)
    want = outcomes(theirs)
    same_outcomes(got, want)  # values, torch's turn order, seeds, random numbers, the error's class and place
    assert len(want) >= 3 and [o[1] for o in want if o[0] == "error"] == [KeyError]


def test_an_iterable_dataset_on_fewer_actors_than_workers_keeps_each_workers_stream(ray_cluster):
    theirs = torch.utils.data.DataLoader(
        Shards(),
        batch_size=2,
        num_workers=3,
        multiprocessing_context=FORKSERVER,
        generator=torch.Generator().manual_seed(2),
    )
    with hybridload.DataLoader(
        Shards(),
        batch_size=2,
        num_workers=3,
        num_actors=2,
        distribute_mode=True,
        generator=torch.Generator().manual_seed(2),
    ) as mine:
        same_outcomes(outcomes(mine), outcomes(theirs))  # two workers on one actor: their random states apart


def test_an_iterable_dataset_on_persistent_workers_goes_on_as_torchs_in_the_second_epoch(ray_cluster):
    theirs, mine = both(Shards(), seed=3, batch_size=4, num_workers=2, persistent_workers=True)
    with mine:
        got = [outcomes(mine) for _ in range(2)]
    want = [outcomes(theirs) for _ in range(2)]
    for g, t in zip(got, want):
        same_outcomes(g, t)
    assert got[0] != got[1]  # iterated again, not reseeded: new random numbers, as torch's


class Late(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        import time

        time.sleep(4 if i == 2 else 0)
        return i


def test_a_batch_past_timeout_is_a_runtime_error_in_both(ray_cluster, torch_looks_at_its_workers_often):
    theirs, mine = both(Late(), batch_size=2, num_workers=1, timeout=1)
    with mine:
        got = outcomes(mine, limit=2)
    want = outcomes(theirs, limit=2)
    assert [o[0] for o in got] == [o[0] for o in want] == ["batch", "error"]
    assert want[1][1] is RuntimeError and issubclass(got[1][1], RuntimeError)
    assert got[1][1] is hybridload.BatchTimeoutError and "batch 1" in got[1][2]


class Dying(IterableDataset):
    """Worker 1's process ends in the middle of its data (a crash, the OOM killer)."""

    def __iter__(self):
        import os
        import time

        info = get_worker_info()
        for j in range(4):
            if info.id == 1 and j == 2:
                time.sleep(0.5)  # what it yielded is sent first (else torch's queue may read a cut message)
                os._exit(3)
            yield j


def until_error(loader, limit: int = 10):
    """Batches until the first exception: (batches, the exception's class)."""
    got, it = [], iter(loader)
    for _ in range(limit):
        try:
            got.append(next(it).tolist())
        except StopIteration:
            return got, None
        except Exception as exc:
            return got, type(exc)
    return got, None


def test_a_worker_that_dies_is_a_runtime_error_in_both(ray_cluster, torch_looks_at_its_workers_often):
    theirs, mine = both(Dying(), batch_size=1, num_workers=2)
    with mine:
        got, mine_error = until_error(mine)
    want, torch_error = until_error(theirs)
    assert got == [[0], [0], [1], [1], [2]]  # in turn, until worker 1's process ends
    assert want == got[: len(want)]  # torch raises as soon as it notices the dead worker: a prefix
    assert torch_error is RuntimeError, torch_error  # "DataLoader worker (pid ...) exited unexpectedly"
    assert mine_error is hybridload.errors.WorkerLost and issubclass(mine_error, RuntimeError)


class DiesOnce(Dataset):
    """Sample 5's first read ends its worker's process (a crash, the OOM killer); a marker file
    makes later reads succeed, so a batch run again elsewhere completes."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __len__(self):
        return 8

    def __getitem__(self, i):
        import os
        import time

        if i == 5 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            time.sleep(0.5)  # what the worker sent before is flushed (torch's queue)
            os._exit(3)
        return torch.tensor(i)


def test_a_map_style_worker_that_dies_torch_raises_the_drop_in_runs_its_batch_again(
    ray_cluster, torch_looks_at_its_workers_often, tmp_path
):
    """The documented difference: torch's loop gets a RuntimeError; the drop-in hands the lost
    actor's batch to another actor and delivers every batch once, in order."""
    theirs = torch.utils.data.DataLoader(
        DiesOnce(tmp_path / "torch"), batch_size=2, num_workers=2, multiprocessing_context=FORKSERVER
    )
    want, torch_error = until_error(theirs)
    assert torch_error is RuntimeError and want == [[0, 1], [2, 3]][: len(want)]
    with hybridload.DataLoader(DiesOnce(tmp_path / "mine"), batch_size=2, num_workers=2, distribute_mode=True) as mine:
        got, mine_error = until_error(mine)
    assert mine_error is None and got == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert (tmp_path / "mine").exists()  # an actor did die on sample 5


SPAWN_SCRIPT = textwrap.dedent("""
    import json
    import sys

    import torch
    import torch.multiprocessing as mp
    from torch.utils.data import Dataset

    import hybridload


    class InScript(Dataset):  # in a spawned child this class lives in __mp_main__
        def __len__(self):
            return 10

        def __getitem__(self, i):
            return torch.tensor([i, i * i])


    def collate_in_script(samples):
        return torch.stack(samples).sum(0)


    def run(rank, address, out):
        kw = dict(batch_size=4, shuffle=True, collate_fn=collate_in_script)
        theirs = torch.utils.data.DataLoader(InScript(), generator=torch.Generator().manual_seed(5), **kw)
        with hybridload.DataLoader(InScript(), num_workers=2, distribute_mode=True, head_address=address,
                                   generator=torch.Generator().manual_seed(5), **kw) as mine:
            got = [b.tolist() for b in mine]
        json.dump({"module": InScript.__module__, "torch": [b.tolist() for b in theirs], "mine": got},
                  open(out, "w"))


    if __name__ == "__main__":
        mp.spawn(run, args=(sys.argv[1], sys.argv[2]), nprocs=1, join=True)
""")


def test_a_dataset_defined_in_a_script_started_by_torch_multiprocessing_spawn_reaches_the_actors(
    ray_cluster, tmp_path, zygote
):
    """The PyTorch DDP tutorial's pattern: the Dataset and collate_fn in the script, the loop in a
    child of ``torch.multiprocessing.spawn`` (where the script is the module ``__mp_main__``,
    which the Ray workers cannot import): the drop-in gives torch's batches. The script runs as
    ``python train_spawn.py`` in the session's zygote; the rank ``mp.spawn`` starts is a fresh
    interpreter."""
    import json
    import os

    script, out = tmp_path / "train_spawn.py", tmp_path / "out.json"
    script.write_text(SPAWN_SCRIPT)
    proc = zygote.run(
        script, args=(ray_cluster[0].address, str(out)), cwd=tmp_path.parent, env=dict(os.environ), timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["module"] == "__mp_main__"
    assert result["mine"] == result["torch"] and len(result["torch"]) == 3


def shuffled_shards():
    """torch's DataPipe recipe: a shuffle, then each worker's shard (torch seeds the shuffle alike in
    every worker and gives each its shard)."""
    from torch.utils.data.datapipes.iter import IterableWrapper

    return IterableWrapper(range(20)).shuffle(buffer_size=5).sharding_filter()


def test_a_shuffled_sharded_datapipe_gives_each_sample_once_in_torchs_order(ray_cluster):
    theirs, mine = both(shuffled_shards(), seed=4, num_workers=2, shuffle=True)
    with mine:
        got = outcomes(mine)
    want = outcomes(theirs)
    same_outcomes(got, want)
    assert sorted(o[1][2][0] for o in got) == list(range(20))  # each sample once: every worker its own shard


def test_a_datapipe_on_persistent_workers_is_reseeded_each_epoch_from_the_global_seed_as_in_torch(ray_cluster):
    def epochs(loader):
        try:
            out = []
            for _ in range(2):
                torch.manual_seed(123)  # torch draws each epoch's shuffle seed from the global generator
                out.append([int(x) for x in loader])
            return out
        finally:
            getattr(loader, "close", lambda: None)()

    kw = dict(num_workers=2, shuffle=True, persistent_workers=True)
    want = epochs(torch.utils.data.DataLoader(shuffled_shards(), multiprocessing_context=FORKSERVER, **kw))
    got = epochs(hybridload.DataLoader(shuffled_shards(), distribute_mode=True, **kw))
    assert got == want and got[0] == got[1] and sorted(got[0]) == list(range(20))


class InitialSeed(Dataset):
    """Each sample: torch's initial seed, the worker's id and info seed as its init saw them, and a
    number of ``random``'s, which the init leaves alone."""

    def __init__(self):
        self.seen = (-1, -1)

    def init(self, worker_id):
        self.seen = (worker_id, get_worker_info().seed)
        torch.manual_seed(12345)

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([torch.initial_seed(), *self.seen, i])


def test_a_seed_set_in_worker_init_fn_holds_in_every_sample_as_in_torch(ray_cluster):
    """torch's test_worker_init_fn: torch.manual_seed(12345) in worker_init_fn holds for every
    sample; the init sees torch's worker seed (base_seed + id), drawn from the same generator."""
    ds = InitialSeed()
    theirs, mine = both(ds, seed=9, batch_size=2, num_workers=2, worker_init_fn=ds.init)
    with mine:
        got = outcomes(mine)
    want = outcomes(theirs)
    same_outcomes(got, want)
    rows = [row for o in got for row in o[1][2]]
    assert {r[0] for r in rows} == {12345} and [r[3] for r in rows] == list(range(8))
    assert {r[1] for r in rows} == {0, 1} and len({r[2] - r[1] for r in rows}) == 1  # base_seed + id, one base


class WorkerQueue(Dataset):
    """torch's TestWorkerQueueDataset: each sample says which worker's init set up its dataset copy."""

    def __init__(self):
        self.worker_id = None

    def worker_init_fn(self, worker_id):
        self.worker_id = worker_id

    def __len__(self):
        return 48

    def __getitem__(self, i):
        return torch.tensor([self.worker_id, get_worker_info().id, i])


@pytest.mark.parametrize("workers", [2, 3])
def test_batches_are_dealt_to_the_workers_in_turn_as_in_torch(ray_cluster, workers):
    """torch's test_ind_worker_queue: batch i runs on worker i % num_workers (its init's dataset copy
    and its get_worker_info().id)."""
    ds = WorkerQueue()
    theirs, mine = both(ds, batch_size=4, num_workers=workers, worker_init_fn=ds.worker_init_fn)
    with mine:
        got = outcomes(mine)
    want = outcomes(theirs)
    same_outcomes(got, want)
    assert [o[1][2][0][:2] for o in got] == [[k % workers] * 2 for k in range(12)]


class SlowStart(WorkerQueue):
    """Worker 1's init takes seconds (a Ray worker importing torch and the user's code on a loaded machine)."""

    def worker_init_fn(self, worker_id):
        import time

        if worker_id == 1:
            time.sleep(6)
        super().worker_init_fn(worker_id)


def test_a_workers_start_is_not_counted_against_the_timeout_of_the_batch_dealt_to_it(ray_cluster):
    """Batch 1 is dealt to worker 1 whatever the others do: an actor's start (seconds of a Ray
    worker's imports, not torch's fork) belongs to the pool's start, under the actors' own start
    timeout, not to that batch's ``timeout``; the batches still come from the workers in turn."""
    ds = SlowStart()
    with hybridload.DataLoader(
        ds, batch_size=4, num_workers=2, worker_init_fn=ds.worker_init_fn, timeout=3, distribute_mode=True
    ) as mine:
        got = outcomes(mine)
    assert [o[0] for o in got] == ["batch"] * 12, got
    assert [o[1][2][0][:2] for o in got] == [[k % 2] * 2 for k in range(12)]


def silence_stderr(worker_id):
    """torch's test_segfault: the worker's stderr goes to /dev/null (no crash line in any log)."""
    import os

    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)


class Segfaults(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        import ctypes

        return ctypes.string_at(0)  # reads address 0: SIGSEGV


def test_a_segfault_with_stderr_silenced_is_a_segmentation_fault_at_the_first_crash_as_in_torch(
    ray_cluster, torch_looks_at_its_workers_often
):
    import time

    theirs, mine = both(Segfaults(), batch_size=2, num_workers=2, worker_init_fn=silence_stderr)  # (with a
    # timeout, torch's iterator looks at its workers only when it runs out: 120 s)
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid"):  # its words need its workers as children
        next(iter(theirs))  # (a fork, as torch's test_segfault has: "is killed by signal"; here a forkserver's)
    with mine:
        it, t0 = iter(mine), time.monotonic()
        with pytest.raises(hybridload.errors.WorkerLost) as got:
            next(it)
        took = time.monotonic() - t0
    msg = str(got.value)
    assert re.search(r"DataLoader worker \(pid \d+\) is killed by signal: Segmentation fault", msg), msg  # torch's
    assert re.search(r"killed 1 workers \(pids \d+\), 1 of them by a crash signal \(SIGSEGV\)", msg), msg
    assert got.value.batch_at_fault and took < 20, took  # the first crash ends it: no four worker starts


def test_an_iterators_workers_are_listed_and_end_once_it_and_its_loader_are_dropped_as_in_torch(ray_cluster):
    """torch's test_partial_workers reads the iterator's ``_workers``: each alive while the pass
    runs, ended (``exitcode`` 0) within the join's timeout once the iterator and its loader go."""
    import gc

    def states(loader) -> tuple:
        it = iter(loader)
        workers = it._workers
        next(it), next(it)
        alive = [w.is_alive() for w in workers]
        del it, loader
        gc.collect()
        for w in workers:
            w.join(30)
        return len(workers), alive, [(w.is_alive(), w.exitcode) for w in workers]

    theirs, mine = both(torch.utils.data.TensorDataset(torch.arange(12)), batch_size=2, num_workers=2)
    want = states(theirs)
    del theirs
    got = states(mine)
    assert got == want == (2, [True, True], [(False, 0), (False, 0)]), (got, want)


class Numbered(Dataset):
    """Sample i is ``[base + i]``: which part of a ConcatDataset a sample came from shows in its value."""

    def __init__(self, n: int, base: int):
        self.n, self.base = n, base

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor([self.base + i])


def four_ways(dataset, make_sampler=None, epochs: int = 2, **kw) -> dict:
    """What each loop sees over ``epochs`` epochs: torch's DataLoader in this process and on two
    worker processes, the drop-in in this process (``distribute_mode=False``) and on two Ray
    actors; each loader gets a fresh ``make_sampler()`` (its own generator, seeded alike)."""
    ways = {
        "torch": (torch.utils.data.DataLoader, {"num_workers": 0}),
        "torch workers": (torch.utils.data.DataLoader, {"num_workers": 2, "multiprocessing_context": FORKSERVER}),
        "drop-in local": (hybridload.DataLoader, {"num_workers": 0}),
        "drop-in ray": (hybridload.DataLoader, {"num_workers": 2, "distribute_mode": True}),
    }
    seen = {}
    for name, (cls, extra) in ways.items():
        torch.manual_seed(5)  # a sampler without a generator of its own draws from the global one
        more = {"sampler": make_sampler()} if make_sampler else {"generator": torch.Generator().manual_seed(3)}
        ld = cls(dataset, **kw, **more, **extra)
        try:
            seen[name] = [outcomes(ld) for _ in range(epochs)]
        finally:
            getattr(ld, "close", lambda: None)()
    return seen


def values(epoch: list) -> list:
    return [v for o in epoch for row in o[1][2] for v in row]


def test_a_concat_dataset_on_actors_gives_torchs_batches_in_torchs_order(ray_cluster):
    concat = torch.utils.data.ConcatDataset([Numbered(5, 0), Numbered(3, 100), Numbered(4, 1000)])
    seen = four_ways(concat, batch_size=5, shuffle=True)
    for name in ("torch workers", "drop-in local", "drop-in ray"):
        for mine, torchs in zip(seen[name], seen["torch"]):
            same_outcomes(mine, torchs)
    first, second = (values(e) for e in seen["torch"])
    assert sorted(first) == [0, 1, 2, 3, 4, 100, 101, 102, 1000, 1001, 1002, 1003] and first != second


@pytest.mark.parametrize("generator", ["its own", "the global one"])
def test_a_weighted_random_sampler_on_actors_draws_torchs_indices_with_the_same_generator(ray_cluster, generator):
    weights = [0.1, 5.0, 0.0, 2.0, 1.0, 0.5, 3.0, 0.0, 1.5, 0.2]

    def sampler():
        own = torch.Generator().manual_seed(11) if generator == "its own" else None
        return torch.utils.data.WeightedRandomSampler(weights, 23, generator=own)

    seen = four_ways(Numbered(10, 0), sampler, batch_size=4)
    for name in ("torch workers", "drop-in local", "drop-in ray"):
        for mine, torchs in zip(seen[name], seen["torch"]):
            same_outcomes(mine, torchs)
    first, second = (values(e) for e in seen["torch"])
    assert len(first) == 23 and first != second  # the generator goes on from epoch to epoch
    assert not set(first + second) & {2, 7}  # weight 0: never drawn
