"""Contestants that several benchmarks time: HybridLoader itself, the raw kernel loop, DALI's
CPU pipeline, torch's DataLoader and Ray Data, each doing one epoch of the ImageNet training
recipe over a photo set.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
import torch.utils.data as tud

from _harness import Contestant
from hybridload import HybridLoader, LoaderPolicy, _kernels as kernels
from hybridload.lanes._cpu_job import process_batch
from hybridload.sampling import sharding


class Batches(Contestant):
    """A contestant whose run counts the images of ``batches(epoch)``, (images, labels, ...)
    tuples, over ``epochs`` epochs."""

    epochs = 1

    def batches(self, epoch: int) -> Iterable[tuple]:
        raise NotImplementedError

    def run(self, epoch: int) -> int:
        return sum(
            b[0].shape[0] for e in range(epoch * self.epochs, (epoch + 1) * self.epochs) for b in self.batches(e)
        )


def max_abs_diff(a: Batches, b: Batches, epoch: int) -> float:
    """Untimed: the largest pixel difference between the batches two contestants deliver for
    ``epoch``; raises unless they deliver as many batches, of the same shapes and labels."""
    got, want = ([(torch.as_tensor(x[0]).cpu(), torch.as_tensor(x[1]).cpu()) for x in c.batches(epoch)] for c in (a, b))
    if len(got) != len(want) or any(x[0].shape != y[0].shape or not torch.equal(x[1], y[1]) for x, y in zip(got, want)):
        raise RuntimeError(f"{a.name} and {b.name} delivered different batches (shapes or labels) in epoch {epoch}")
    return max(float((x[0].int() - y[0].int()).abs().max()) for x, y in zip(got, want))


class Loader(Batches):
    """``HybridLoader(..., policy=..., seed=0)``, built once; a run iterates ``epochs`` epochs;
    ``finish`` adds the consumer's stall seconds and each lane's share of the images."""

    def __init__(
        self,
        name: str,
        source,
        rec,
        batch_size: int,
        policy: LoaderPolicy,
        threads: int,
        device: str | None = "cpu",
        epochs: int = 1,
    ):
        self.name, self.threads, self.epochs = name, threads, epochs
        self.loader = HybridLoader(source, rec, batch_size, policy=policy, seed=0, device=device)

    def batches(self, epoch: int) -> HybridLoader:
        self.loader.set_epoch(epoch)
        return self.loader

    def prepare(self) -> None:
        self._before = self.loader.stats()

    def finish(self) -> dict:
        before, after = self._before, self.loader.stats()
        done = {k: v["images"] - before["lanes"].get(k, {}).get("images", 0) for k, v in after["lanes"].items()}
        total = sum(done.values())
        return {
            "stall_s": float(after["stall_s"] - before["stall_s"]),
            "lane_share": {k: (v / total if total else 0.0) for k, v in done.items()},
        }

    def close(self) -> None:
        self.loader.close()


class TracedLoader(Loader):
    """`Loader` with ``loader.trace(trace_path)`` recording over each run (the JSON written at the
    run's end, inside its time): what a trace costs when on."""

    def __init__(self, *args, trace_path: str, **kw):
        super().__init__(*args, **kw)
        self.trace_path = trace_path

    def run(self, epoch: int) -> int:
        with self.loader.trace(self.trace_path):
            return super().run(epoch)


class KernelBatches(Batches):
    """``one(indices, epoch)``, by default ``process_batch`` (a CPU lane's batch job), over ``sharding.rank_batches``
    (seed 0; epoch 0 unshuffled when ``shuffle`` is False): a loop on this thread, or a
    ThreadPoolExecutor(threads) when ``threads > 1`` or ``pooled``, consumed in order."""

    def __init__(
        self,
        name: str,
        source,
        rec,
        batch_size: int,
        threads: int = 1,
        shuffle: bool = True,
        epochs: int = 1,
        pooled: bool = False,
    ):
        self.name, self.threads, self.epochs = name, threads, epochs
        self.source, self.rec, self.batch_size, self.shuffle = source, rec, batch_size, shuffle
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix=f"bench-{name}") if threads > 1 or pooled else None

    def one(self, indices: np.ndarray, epoch: int) -> tuple:
        r = process_batch(self.source, self.rec, indices, 0, epoch, on_error="raise")
        return r.images, r.labels

    def batches(self, epoch: int) -> Iterator[tuple]:
        e = epoch if self.shuffle else 0
        order = sharding.rank_batches(
            len(self.source), batch_size=self.batch_size, seed=0, epoch=e, shuffle=self.shuffle
        )
        one = functools.partial(self.one, epoch=e)
        return map(one, order) if self.pool is None else self.pool.map(one, order)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


class DaliFiles(Contestant):
    """DALI's CPU pipeline: readers.file -> decoders.image_random_crop -> resize ->
    crop_mirror_normalize (random flip), uint8 CHW, ``device_id=None``; a fresh one per round
    (2 warm-up runs, deleted after), so its prefetch never overlaps another contestant. A run is
    ``iterations`` batches (default: the whole folder, the last padded)."""

    pads = True

    def __init__(
        self,
        folder: Path,
        n: int,
        threads: int,
        batch_size: int,
        size: int,
        iterations: int | None = None,
        name: str = "dali",
    ):
        self.name, self.threads = name, threads
        self.folder, self.n, self.batch_size, self.size = folder, n, batch_size, size
        self.iterations = iterations or math.ceil(n / batch_size)
        self._pipe = None

    def prepare(self) -> None:
        from nvidia.dali import fn, pipeline_def, types

        root, size = str(self.folder), self.size

        @pipeline_def(batch_size=self.batch_size, num_threads=self.threads, device_id=None)
        def rrc_pipeline():
            jpegs, labels = fn.readers.file(file_root=root, random_shuffle=False, name="Reader")
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_x=size, resize_y=size)
            images = fn.crop_mirror_normalize(
                images, mirror=fn.random.coin_flip(), dtype=types.UINT8, output_layout="CHW"
            )
            return images, labels

        self._pipe = pipe = rrc_pipeline()
        pipe.build()
        if pipe.epoch_size("Reader") != self.n:
            raise RuntimeError(f"DALI's reader found {pipe.epoch_size('Reader')} files under {root}, expected {self.n}")
        for _ in range(2):
            pipe.run()

    def run(self, epoch: int) -> int:
        return sum(len(self._pipe.run()[0]) for _ in range(self.iterations))

    def finish(self) -> None:
        self._pipe = None

    close = finish


class KernelDataset(tud.Dataset):
    """A map-style dataset whose item (epoch, i) is ``_kernels.process_sample`` of sample i (seed 0)."""

    def __init__(self, source, rec):
        self.source, self.rec = source, rec

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, key):
        epoch, i = key
        return kernels.process_sample(self.source, self.rec, i, 0, epoch)


def one_torch_thread(_worker_id: int = 0) -> None:
    torch.set_num_threads(1)


def epoch_keys(n: int, epoch: int) -> list[tuple[int, int]]:
    """One epoch's (epoch, index) keys in the shuffled order (seed 0)."""
    return [(epoch, int(i)) for i in sharding.epoch_order(n, 0, epoch, True)]


def torch_loader(batch_size: int, workers: int) -> Callable:
    """``make`` for `SampledLoader`: torch's DataLoader, persistent workers of one torch thread each."""
    return lambda ds, sampler: tud.DataLoader(
        ds,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=workers,
        persistent_workers=True,
        worker_init_fn=one_torch_thread,
    )


class SampledLoader(Batches):
    """A torch-style loader ``make(dataset, sampler)``, this object its sampler: it yields
    (epoch, index) in a shuffled order (seed 0), so persistent workers see the epoch. A run sets
    the epoch and counts the images of one pass."""

    def __init__(self, name: str, dataset, threads: int, make: Callable):
        self.name, self.threads, self.n, self.epoch = name, threads, len(dataset), 0
        self.dl = make(dataset, self)

    def __iter__(self):
        return iter(epoch_keys(self.n, self.epoch))

    def batches(self, epoch: int) -> Iterable[tuple]:
        self.epoch = epoch
        return self.dl

    def close(self) -> None:
        it = getattr(self.dl, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()  # persistent workers: end them now, not at exit


def ray_data_decode(batch: dict, *, rec, index_of: dict, seed: int, epoch: int) -> dict:
    """map_batches fn: decode + augment each row's bytes with hybridload's kernels. (It must not
    name the ``torch`` global: cloudpickle would take ``params.ops`` for ``torch.ops``.)"""
    from hybridload._kernels import apply_ops, decode_image

    one_torch_thread()
    h, w = rec.out_hw
    out, labels = np.empty((len(batch["bytes"]), 3, h, w), np.uint8), np.empty(len(batch["bytes"]), np.int64)
    for k, (data, path) in enumerate(zip(batch["bytes"], batch["path"])):
        i, labels[k] = index_of[str(path).lstrip("/")]
        arr = decode_image(data)
        params = rec.sample_params(seed, epoch, i, arr.shape[1], arr.shape[0])
        out[k] = apply_ops(arr, params.ops, params.stages).permute(2, 0, 1).numpy()
    return {"image": out, "label": labels}


class RayData(Contestant):
    """``ray.data.read_binary_files(paths).map_batches(ray_data_decode).iter_torch_batches()``,
    limited to ``cpus`` CPUs, in the running Ray session; ImportError when Ray Data is missing."""

    name = "ray-data"

    def __init__(self, source, rec, batch_size: int, cpus: int):
        try:
            import pydantic  # noqa: F401  (iter_torch_batches imports ray.train, which needs it)
            import ray.data
        except ImportError as exc:
            raise ImportError(f"{exc}; pip install 'ray[data]' pydantic") from None
        self.threads, self.rec, self.batch_size = cpus, rec, batch_size
        self.paths = [os.path.abspath(source.ref(i).location) for i in range(len(source))]
        self.index_of = {p.lstrip("/"): (i, source.ref(i).label) for i, p in enumerate(self.paths)}
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.resource_limits = ray.data.ExecutionResources(cpu=cpus)
        for attr in ("enable_progress_bars", "enable_operator_progress_bars", "print_on_execution_start"):
            if hasattr(ctx, attr):
                setattr(ctx, attr, False)
        self._ray_data = ray.data

    def run(self, epoch: int) -> int:
        ds = self._ray_data.read_binary_files(self.paths, include_paths=True).map_batches(
            ray_data_decode,
            batch_size=self.batch_size,
            batch_format="numpy",
            fn_kwargs={"rec": self.rec, "index_of": self.index_of, "seed": 0, "epoch": epoch},
        )
        return sum(b["image"].shape[0] for b in ds.iter_torch_batches(batch_size=self.batch_size, device="cpu"))
