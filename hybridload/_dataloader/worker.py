"""The drop-in's actor for a map-style dataset: what one torch worker process does (torch's fetch,
seeds, worker info, ``worker_init_fn`` first), the user's exceptions coming back as `UserFailure`
values, as torch's ``ExceptionWrapper``, so the pass goes on and the driver re-raises them with
their class."""

from __future__ import annotations

import inspect
import random
import re
import sys
import traceback

import numpy as np
import torch

from hybridload._compat import set_torch_worker_info, torch_key_error, torch_worker_numpy_seed
from hybridload.errors import HybridLoadError, UserCodeError
from hybridload.lanes._ray import PoolWorker


class UserFailure:
    """An exception of the user's code, carried across the actor boundary: its class, its
    formatted traceback and where it happened (torch's ``ExceptionWrapper`` plus the batch)."""

    def __init__(self, exc_info, where: str):
        self.exc_type = exc_info[0]
        self.exc_msg = "".join(traceback.format_exception(*exc_info))
        self.reason = f"{exc_info[0].__name__}: {exc_info[1]}"
        self.where = where

    def error(self) -> BaseException:
        """The exception to raise: the original class with ``Caught <Type> <where>.`` and the
        worker's traceback, or a `UserCodeError` where that class cannot be built from one message."""
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        try:
            if self.exc_type is KeyError:
                return torch_key_error(msg)  # KeyError repr()s its argument: keep it readable
            if getattr(self.exc_type, "message", None):
                return self.exc_type(message=msg)
            exc = self.exc_type(msg)
            if isinstance(exc, BaseException):
                return exc
        except Exception:  # several arguments, keyword-only, ...: not reconstructible
            pass
        return UserCodeError(self.where, self.reason, self.exc_msg)

    def reraise(self):
        raise self.error()

    @classmethod
    def unsendable(cls, exc: BaseException, seq: int) -> "UserFailure | None":
        """Batch ``seq``'s result that Ray could not send back (a lock, an open file inside it) as a
        value with the cause's class; None for any other failure."""
        cause = getattr(exc, "cause", None)
        if not isinstance(cause, Exception) or isinstance(cause, HybridLoadError):
            return None
        self = cls.__new__(cls)
        self.exc_type, self.reason = type(cause), f"{type(cause).__name__}: {cause}"
        self.exc_msg = ANSI.sub("", str(exc))
        self.where = (
            f"in a DataLoader worker (a Ray actor), batch {seq}: Ray could not send back what collate_fn "
            f"returned ({self.reason}); return tensors, arrays, numbers, strings or containers of them"
        )
        return self


#: terminal colour codes (Ray colours the task name in its error text)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Generated:
    """A batch ``collate_fn`` returned as a generator, listed in the actor: Ray takes a returned
    generator for a stream of returns and would keep only its first item."""

    def __init__(self, items: list):
        self.items = items

    def generator(self):
        return (item for item in self.items)


def shippable(batch):
    """``batch`` as an actor may return it: a generator listed into a `Generated`."""
    return Generated(list(batch)) if inspect.isgenerator(batch) else batch


class InitFailed(HybridLoadError):
    """``worker_init_fn`` raised in an actor; ``failure`` (a `UserFailure`) re-raises it."""

    def __init__(self, failure: UserFailure):
        self.failure = failure
        super().__init__(f"{failure.where}: {failure.reason}")

    def __reduce__(self):
        return (type(self), (self.failure,))


class DatasetWorker(PoolWorker):
    """The actor: ``collate_fn(fetch(indices))`` with torch's worker seeds and info
    (docs/guide/dropin.md). ``bundle`` is ``(dataset, collate_fn, worker_init_fn)`` in one piece, so
    a ``worker_init_fn`` bound to the dataset changes the very dataset it reads; with fewer actors
    than ``asked``, an actor hosts the ids ``worker_id, worker_id + num_workers, ...``, each its own
    copy (one shared when there is no ``worker_init_fn``). Generators ``worker_init_fn`` seeds run
    on in their id's stream; the rest are reseeded per batch from its task, so a batch's random
    numbers do not depend on the actor running it."""

    def __init__(
        self, bundle, auto_collation, asked: int = 0, base_seed: int = 0, worker_id: int = 0, num_workers: int = 1
    ):
        super().__init__()
        self.auto = auto_collation
        self.worker_id, self.num_workers = worker_id, max(asked, worker_id + 1) if asked else num_workers
        ids = range(worker_id, self.num_workers, max(1, num_workers)) if asked else [worker_id]
        self.hosted: dict[int, tuple] = {}  # worker id -> (dataset, collate_fn): its own copy
        self.streams: dict[int, Streams] = {}  # worker id -> its generators' states, those worker_init_fn took
        self.init_failure = None
        for k, wid in enumerate(ids):
            if k and bundle[2] is not None:  # a copy only where worker_init_fn may set it up (memory: one per id)
                from ray import cloudpickle  # in the actor: Ray is there (never at hybridload's import)

                bundle = cloudpickle.loads(cloudpickle.dumps(bundle))
            dataset, collate_fn, worker_init_fn = bundle
            self.hosted[wid] = (dataset, collate_fn)
            seed_as_torch_worker(base_seed, wid)
            set_worker_info(wid, self.num_workers, base_seed + wid, dataset)
            before = rng_states()
            if worker_init_fn is not None and self.init_failure is None:
                try:
                    worker_init_fn(wid)
                except Exception:
                    self.init_failure = UserFailure(
                        sys.exc_info(), f"in worker_init_fn of DataLoader worker {wid} (a Ray actor)"
                    )
            after = rng_states()
            self.streams[wid] = Streams({name for name in after if after[name] != before[name]})
            self.streams[wid].save()
        self.dataset, self.collate_fn = self.hosted[worker_id]

    def _as(self, seq: int) -> int:
        """The worker id batch ``seq`` runs as on this actor."""
        wid = seq % self.num_workers
        return wid if wid in self.hosted else list(self.hosted)[seq % len(self.hosted)]

    def ready(self) -> str:
        if self.init_failure is not None:
            raise InitFailed(self.init_failure)
        return super().ready()

    def run(self, indices, seed: int, seq: int = 0):
        wid = self._as(seq)
        streams = self.streams[wid]
        streams.restore(seed)
        dataset, collate_fn = self.hosted[wid]
        set_worker_info(wid, self.num_workers, seed, dataset)
        try:
            return self._fetch(wid, dataset, collate_fn, indices, seq)
        finally:
            streams.save()

    def _fetch(self, wid: int, dataset, collate_fn, indices, seq: int):
        at = f"in DataLoader worker {wid} (a Ray actor), batch {seq}"
        where = at
        try:
            if not self.auto:
                where = f"{at} (indices {short(indices)}), in dataset[indices] or collate_fn"
                return shippable(collate_fn(dataset[indices]))
            getitems = getattr(dataset, "__getitems__", None)
            if getitems:  # torch >= 2.0 fetches the batch with one call
                where = f"{at} (indices {short(indices)}): dataset.__getitems__"
                samples = getitems(indices)
            else:
                samples = []
                for i in indices:
                    where = f"{at} (indices {short(indices)}), sample {i}: dataset[{i}]"
                    samples.append(dataset[i])
            where = f"{at} (indices {short(indices)}): collate_fn"
            return shippable(collate_fn(samples))
        except HybridLoadError:
            raise
        except Exception:  # the user's code: the batch's outcome, delivered once at its place
            return UserFailure(sys.exc_info(), where)


GENERATORS = ("random", "numpy", "torch")


def seed_as_torch_worker(base_seed: int, worker_id: int) -> None:
    """``random``, numpy and torch seeded as torch seeds worker ``worker_id`` of a pass."""
    random.seed(base_seed + worker_id)
    torch.manual_seed(base_seed + worker_id)
    np.random.seed(torch_worker_numpy_seed(base_seed, worker_id))


def rng_states() -> dict:
    """The global generators' states, comparable: what ``worker_init_fn`` changed of them."""
    state = np.random.get_state(legacy=False)
    return {
        "random": random.getstate(),
        "numpy": (state["state"]["key"].tobytes(), state["state"]["pos"], state["has_gauss"], state["gauss"]),
        "torch": torch.get_rng_state().numpy().tobytes(),
    }


class Streams:
    """One worker id's generators: those its ``worker_init_fn`` took keep their state between
    batches, apart from other ids' on the actor; the rest are reseeded per batch."""

    def __init__(self, owned: set):
        self.owned = owned
        self._saved: dict = {}

    def save(self) -> None:
        if "random" in self.owned:
            self._saved["random"] = random.getstate()
        if "numpy" in self.owned:
            self._saved["numpy"] = np.random.get_state()
        if "torch" in self.owned:
            self._saved["torch"] = torch.get_rng_state()

    def restore(self, seed: int) -> None:
        """The user's generators back as this id left them; the others seeded ``seed``."""
        if "random" in self.owned:
            random.setstate(self._saved["random"])
        else:
            random.seed(seed)
        if "numpy" in self.owned:
            np.random.set_state(self._saved["numpy"])
        else:
            np.random.seed(seed % (2**32))
        if "torch" in self.owned:
            torch.set_rng_state(self._saved["torch"])
        else:
            torch.manual_seed(seed)


def short(indices) -> str:
    """A batch's indices for a message (at most 16 shown)."""
    if not hasattr(indices, "__len__"):  # batch_size=None: one sample index
        return str(indices)
    shown = [int(i) for i in list(indices)[:16]]
    return f"{shown}" if len(indices) <= 16 else f"{shown[:-1]} ... ({len(indices)} in all)"


def set_worker_info(worker_id: int, num_workers: int, seed: int, dataset) -> None:
    """What ``torch.utils.data.get_worker_info()`` returns inside the actor."""
    set_torch_worker_info(worker_id, num_workers, seed, dataset)
