#!/usr/bin/env python
"""HybridLoader's Ray lane against torch's DataLoader, Ray Data, DALI and the raw kernels.

Part 1, side by side in one process on the same photo JPEGs and the same cores, recipe
``imagenet_train(224)`` (RandomResizedCrop + flip, uint8 CHW), batch 64. Every round
runs each contestant over the whole set once (who goes first rotates), after untimed
warm-up; the report gives the median images/s per contestant over the rounds.

* ``hybridload``: ``HybridLoader(source, rec, 64, policy=LoaderPolicy(mode="cpu",
  cpu_actors=2, reserve_local_cpus=0, placement="any"), device="cpu")``: two Ray CPU
  actors running ``kernels/``. One loader lives across rounds (``set_epoch`` per round).
* ``torch-dataloader``: ``torch.utils.data.DataLoader(num_workers=2, batch_size=64,
  persistent_workers=True)`` over a map-style dataset whose ``__getitem__`` calls
  ``kernels.process_sample`` (workers: ``torch.set_num_threads(1)``). Its workers are
  forked before Ray starts.
* ``ray-data``: ``ray.data.read_binary_files(paths, include_paths=True)
  .map_batches(decode + recipe.sample_params + apply_ops, batch_size=64)
  .iter_torch_batches(batch_size=64)``, limited to 2 CPUs
  (``DataContext.execution_options.resource_limits``), in the same Ray session.
* ``dali``: DALI's CPU pipeline, ``num_threads=2`` (readers.file ->
  decoders.image_random_crop -> resize -> crop_mirror_normalize, as bench_kernels.py).
* ``raw-kernels``: ``kernels.process_batch`` in a loop on one thread
  (``torch.set_num_threads(1)``); the report multiplies it by the usable cores to get
  the ideal the multi-worker contestants are held against.
* ``raw-kernels-pool`` (for reference): the same loop on a ThreadPoolExecutor(2), in this
  process: what the two cores really give together, without any loader.

Ray runs embedded on 127.0.0.1 (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0), started by this
script with ``include_dashboard=False`` and 2 + 2 *logical* CPUs: the loader's two actors
hold one each for their lifetime, so Ray Data gets the other two. Only one contestant
runs at a time, on the same physical cores.

Part 2 (``--ingest``, on by default): the ingest ceiling. A simulated two-node cluster
(``ray.cluster_utils.Cluster``: head with 1 CPU, one worker node with 1 CPU, both on
127.0.0.1, 300 MB object stores); one actor on the worker node returns a pre-made uint8
array of shape (64, 3, 224, 224) per call. Measured: batches/s and GB/s the driver
receives through hybridload's ActorPool (placement "remote-first", driven by
Scheduler + OrderedMerger as ``hybridload/dataloader.py`` does, results copied into a
torch buffer as ``RayLane.convert`` does) against a raw ``ray.get`` loop on the same
actor with the same number in flight, with and without that copy.

Goals (ratios of the medians): hybridload / torch DataLoader >= 1.5; hybridload / Ray
Data >= 1.5; hybridload / (raw kernels x cores) >= 0.9. hybridload / DALI is reported.

Ray Data needs pandas and pyarrow, and ``iter_torch_batches`` imports ray.train, which
needs pydantic. If they are not importable, the script looks in ``--ray-data-site``
(default data/raydata-site, made with ``pip install --no-deps --target data/raydata-site
pandas pyarrow pydantic pydantic-core annotated-types typing-inspection``) and hands that
folder to Ray's workers too; without them the Ray Data contestant is skipped.

Run:  python benchmarks/bench_ray_lane.py [--n 1024] [--rounds 5] [--out bench-ray-lane.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (DEFAULT_PHOTO_ROOT, OTHER_LOAD_WARN, REPO, check_ray_loopback, fmt,  # noqa: E402
                     photo_source, ray_loopback_env, ratio, rotate, setup_logging, summarize, timed, usable_cpus)

ray_loopback_env()  # before anything imports ray

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.utils.data as tud  # noqa: E402

from hybridload import HybridLoader, LoaderPolicy, kernels, recipe, sharding, sources  # noqa: E402

log = logging.getLogger("bench_ray_lane")

GOALS = {"hybridload / torch DataLoader": 1.5, "hybridload / Ray Data": 1.5,
         "hybridload / (raw kernels x cores)": 0.9}
MB = 2 ** 20


# --------------------------------------------------------------------------- contestants

class Contestant:
    """``epoch(e)`` processes the whole set once and returns the number of images."""

    name = ""
    workers = 1

    def warmup(self, epoch: int) -> None:
        self.epoch(epoch)

    def epoch(self, epoch: int) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


class HybridRay(Contestant):
    name = "hybridload"

    def __init__(self, source, rec, batch_size: int, actors: int):
        self.workers = actors
        self.policy = LoaderPolicy(ray_address="embedded", mode="cpu", cpu_actors=actors, reserve_local_cpus=0, placement="any")
        self.loader = HybridLoader(source, rec, batch_size, policy=self.policy, seed=0, device="cpu")

    def epoch(self, epoch: int) -> int:
        self.loader.set_epoch(epoch)
        return sum(images.shape[0] for images, _labels in self.loader)

    def close(self) -> None:
        self.loader.close()


class _EpochSampler(tud.Sampler):
    """Yields (epoch, index) in a shuffled order, so persistent workers see the epoch."""

    def __init__(self, n: int, seed: int = 0):
        self.n, self.seed, self.ep = n, seed, 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        order = sharding.epoch_order(self.n, self.seed, self.ep, True)
        return iter([(self.ep, int(i)) for i in order])


class _KernelDataset(tud.Dataset):
    def __init__(self, source, rec, seed: int = 0):
        self.source, self.rec, self.seed = source, rec, seed

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, key):
        epoch, i = key
        return kernels.process_sample(self.source, self.rec, i, self.seed, epoch)


def _torch_worker_init(_worker_id: int) -> None:
    torch.set_num_threads(1)


class TorchDataLoader(Contestant):
    name = "torch-dataloader"

    def __init__(self, source, rec, batch_size: int, workers: int):
        self.workers = workers
        self.sampler = _EpochSampler(len(source))
        self.dl = tud.DataLoader(_KernelDataset(source, rec), batch_size=batch_size, sampler=self.sampler,
                                 num_workers=workers, persistent_workers=True, worker_init_fn=_torch_worker_init)

    def epoch(self, epoch: int) -> int:
        self.sampler.ep = epoch
        return sum(images.shape[0] for images, _labels in self.dl)

    def close(self) -> None:
        it = getattr(self.dl, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()  # persistent workers: end them now, not at exit
        self.dl = None


def _one_torch_thread() -> None:
    torch.set_num_threads(1)


def _ray_data_decode(batch: dict, *, rec, index_of: dict, seed: int, epoch: int) -> dict:
    """map_batches fn: decode + augment each row's bytes with hybridload's kernels.

    (It must not name the ``torch`` global: cloudpickle, pickling it by value, would then
    take ``params.ops`` for the pseudo-module ``torch.ops`` and fail.)"""
    from hybridload.kernels import apply_ops, decode_image
    _one_torch_thread()
    n = len(batch["bytes"])
    h, w = rec.out_hw
    out = np.empty((n, 3, h, w), np.uint8)
    labels = np.empty(n, np.int64)
    for k, (data, path) in enumerate(zip(batch["bytes"], batch["path"])):
        i, labels[k] = index_of[str(path).lstrip("/")]
        arr = decode_image(data)
        params = rec.sample_params(seed, epoch, i, arr.shape[1], arr.shape[0])
        img = apply_ops(arr, params.ops, params.stages)
        out[k] = img.permute(2, 0, 1).numpy()
    return {"image": out, "label": labels}


class RayData(Contestant):
    name = "ray-data"

    def __init__(self, source, rec, batch_size: int, cpus: int, blocks: int | None):
        import ray.data
        self.workers = cpus
        self.rec, self.batch_size, self.blocks = rec, batch_size, blocks
        self.paths = [source.ref(i).location for i in range(len(source))]
        self.index_of = {os.path.abspath(p).lstrip("/"): (i, source.ref(i).label) for i, p in enumerate(self.paths)}
        self.paths = [os.path.abspath(p) for p in self.paths]
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.resource_limits = ray.data.ExecutionResources(cpu=cpus)
        ctx.enable_progress_bars = False
        for attr in ("enable_operator_progress_bars", "print_on_execution_start"):
            if hasattr(ctx, attr):
                setattr(ctx, attr, False)
        self._ray_data = ray.data

    def epoch(self, epoch: int) -> int:
        kw = {} if self.blocks is None else {"override_num_blocks": self.blocks}
        ds = (self._ray_data.read_binary_files(self.paths, include_paths=True, **kw)
              .map_batches(_ray_data_decode, batch_size=self.batch_size, batch_format="numpy",
                           fn_kwargs={"rec": self.rec, "index_of": self.index_of, "seed": 0, "epoch": epoch}))
        n = 0
        for batch in ds.iter_torch_batches(batch_size=self.batch_size, device="cpu"):
            n += batch["image"].shape[0]
        return n


class RawKernels(Contestant):
    """kernels.process_batch over the epoch's batches, one thread, in this process."""

    name = "raw-kernels"

    def __init__(self, source, rec, batch_size: int):
        self.source, self.rec, self.batch_size = source, rec, batch_size

    def epoch(self, epoch: int) -> int:
        n = 0
        for idx in sharding.rank_batches(len(self.source), batch_size=self.batch_size, seed=0, epoch=epoch):
            n += len(kernels.process_batch(self.source, self.rec, idx, 0, epoch, on_error="raise").indices)
        return n


class RawKernelsPool(RawKernels):
    """The same over a ThreadPoolExecutor of ``threads`` (what the cores give together, measured)."""

    name = "raw-kernels-pool"

    def __init__(self, source, rec, batch_size: int, threads: int):
        super().__init__(source, rec, batch_size)
        from concurrent.futures import ThreadPoolExecutor
        self.workers = threads
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="bench-raw")

    def epoch(self, epoch: int) -> int:
        def one(idx):
            return len(kernels.process_batch(self.source, self.rec, idx, 0, epoch, on_error="raise").indices)
        return sum(self.pool.map(one, sharding.rank_batches(len(self.source), batch_size=self.batch_size, seed=0,
                                                             epoch=epoch)))

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class Dali(Contestant):
    """bench_kernels.DaliPipeline (fresh pipeline per round, built and warmed up untimed)."""

    name = "dali"

    def __init__(self, folder: Path, n: int, threads: int, batch_size: int, size: int):
        from bench_kernels import DaliPipeline
        self.workers = threads
        self.pipe = DaliPipeline(folder, n, threads, batch_size, size)
        self.pipe.setup()

    def before(self) -> None:
        self.pipe.before_run()

    def after(self) -> None:
        self.pipe.after_run()

    def warmup(self, epoch: int) -> None:
        self.before()
        try:
            self.pipe.run()
        finally:
            self.after()

    def epoch(self, epoch: int) -> int:
        return self.pipe.run()

    def close(self) -> None:
        self.pipe.close()


def close_all(contestants) -> None:
    """Close every contestant, logging (not raising) a failure so the rest still close."""
    for c in contestants:
        try:
            c.close()
        except Exception as exc:  # keep closing the rest
            log.warning("closing %s failed: %s", c.name, exc)


def time_epoch(c: Contestant, epoch: int) -> dict:
    before, after = getattr(c, "before", None), getattr(c, "after", None)
    if before:
        before()
    try:
        return timed(c.epoch, epoch)
    finally:
        if after:
            after()


# --------------------------------------------------------------------------- part 1

def ray_data_available(site: Path | None) -> str | None:
    """None when Ray Data imports (maybe after adding ``site``), else why not."""
    try:
        import pydantic  # noqa: F401  (iter_torch_batches imports ray.train, which needs it)
        import ray.data  # noqa: F401
        return None
    except ImportError as exc:
        first = exc
    if site is not None and site.is_dir():
        sys.path.insert(0, str(site))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
        for m in [m for m in sys.modules if m == "ray.data" or m.startswith("ray.data.")]:
            del sys.modules[m]
        try:
            import pydantic  # noqa: F401
            import ray.data  # noqa: F401
            log.info("Ray Data: pandas/pyarrow/pydantic taken from %s (also on the Ray workers' PYTHONPATH)", site)
            return None
        except ImportError as exc:
            return f"{exc} (also with {site})"
    return f"{first}; pip install 'ray[data]' pydantic, or pip install --no-deps --target {site} pandas pyarrow " \
        "pydantic pydantic-core annotated-types typing-inspection"


def part_loaders(args, folder: Path, source, rec) -> dict:
    import ray
    cores = usable_cpus()
    names = set(args.contestants.split(","))
    contestants: list[Contestant] = []
    skipped: dict[str, str] = {}
    env: dict = {}
    started_ray = False
    per_round: dict[str, list[dict]] = {}
    try:
        if "torch-dataloader" in names:
            tdl = TorchDataLoader(source, rec, args.batch_size, args.workers)
            t0 = time.perf_counter()
            tdl.warmup(10_000)  # forks the persistent workers before Ray's threads exist
            log.info("torch DataLoader: workers started, warm-up epoch %.1f s", time.perf_counter() - t0)
            contestants.append(tdl)
        why = ray_data_available(args.ray_data_site) if "ray-data" in names else "not selected"
        if why and "ray-data" in names:
            log.warning("skipping Ray Data: %s", why)
            skipped["ray-data"] = why
        if {"hybridload", "ray-data"} & names:
            t0 = time.perf_counter()
            ray.init(address="local", num_cpus=2 * args.workers, include_dashboard=False,
                     _node_ip_address="127.0.0.1", object_store_memory=args.object_store_mb * MB,
                     logging_level=logging.WARNING, log_to_driver=False)
            started_ray = True
            env["ray_nodes"] = check_ray_loopback(ray)
            env["ray"] = ray.__version__
            log.info("Ray %s started on %s in %.1f s (%d logical CPUs)", ray.__version__, env["ray_nodes"],
                     time.perf_counter() - t0, 2 * args.workers)
        if "hybridload" in names:
            t0 = time.perf_counter()
            hl = HybridRay(source, rec, args.batch_size, args.workers)
            hl.warmup(10_000)
            log.info("hybridload: actors started and warm-up epoch done in %.1f s", time.perf_counter() - t0)
            contestants.insert(0, hl)
        if "ray-data" in names and not why:
            rd = RayData(source, rec, args.batch_size, args.workers, args.ray_data_blocks)
            t0 = time.perf_counter()
            rd.warmup(10_000)
            log.info("Ray Data: warm-up epoch %.1f s", time.perf_counter() - t0)
            contestants.append(rd)
        if "dali" in names:
            try:
                d = Dali(folder, args.n, args.workers, args.batch_size, args.size)
                d.warmup(0)
                contestants.append(d)
            except ImportError as exc:
                skipped["dali"] = str(exc)
        if "raw-kernels" in names:
            raw = RawKernels(source, rec, args.batch_size)
            raw.warmup(10_000)
            contestants.append(raw)
        if "raw-kernels-pool" in names:
            rawp = RawKernelsPool(source, rec, args.batch_size, args.workers)
            rawp.warmup(10_000)
            contestants.append(rawp)
        per_round = {c.name: [] for c in contestants}
        log.info("%d contestants: %s; %d untimed warm-up round(s), then %d timed rounds", len(contestants),
                 ", ".join(c.name for c in contestants), args.warmup_rounds, args.rounds)
        for rnd in range(-args.warmup_rounds, args.rounds):
            for c in rotate(contestants, rnd):
                r = time_epoch(c, 20_000 + rnd if rnd < 0 else rnd)
                if rnd < 0:
                    log.info("warm-up   %-17s %7.0f img/s (discarded)", c.name, r["images_per_s"])
                    continue
                if r["images"] != args.n and not (c.name == "dali" and r["images"] >= args.n):  # DALI pads
                    raise RuntimeError(f"{c.name} produced {r['images']} images, expected {args.n}")
                per_round[c.name].append(r)
                log.info("round %d/%d  %-17s %7.0f img/s  (CPU util: process %.2f, with children %.2f; "
                         "other load %s)", rnd + 1, args.rounds, c.name, r["images_per_s"], r["cpu_util"],
                         r["tree_cpu_util"], fmt(r["other_load"], ".2f"))
        if any(c.name == "hybridload" for c in contestants):
            hl_stats = next(c for c in contestants if c.name == "hybridload").loader.stats()
            env["hybridload_lanes"] = {k: v["images"] for k, v in hl_stats["lanes"].items()}
    finally:
        close_all(contestants)
        if started_ray:
            ray.shutdown()
    results = {c.name: summarize(per_round[c.name], c.workers) for c in contestants if per_round.get(c.name)}
    out = {"results": results, "skipped": skipped, "env": env, "cores": cores}
    if "raw-kernels" in results:
        # the ideal: one thread's rate on every usable core
        ideal = [dict(r, images_per_s=r["images_per_s"] * cores) for r in results["raw-kernels"]["rounds"]]
        results[f"raw-kernels x {cores}"] = summarize(ideal, cores)
    ratios = {
        "hybridload / torch DataLoader": ratio(results, "hybridload", "torch-dataloader"),
        "hybridload / Ray Data": ratio(results, "hybridload", "ray-data"),
        "hybridload / (raw kernels x cores)": ratio(results, "hybridload", f"raw-kernels x {cores}"),
        "hybridload / DALI (2 threads)": ratio(results, "hybridload", "dali"),
        "hybridload / raw kernels thread pool": ratio(results, "hybridload", "raw-kernels-pool"),
        "raw kernels thread pool / (raw kernels x cores)": ratio(results, "raw-kernels-pool",
                                                                 f"raw-kernels x {cores}"),
        "torch DataLoader / (raw kernels x cores)": ratio(results, "torch-dataloader", f"raw-kernels x {cores}"),
        "Ray Data / (raw kernels x cores)": ratio(results, "ray-data", f"raw-kernels x {cores}"),
    }
    out["ratios"] = ratios
    out["goals"] = {k: (None if ratios[k] is None else {"min": g, "value": ratios[k]["of_medians"],
                                                          "met": ratios[k]["of_medians"] >= g})
                    for k, g in GOALS.items()}
    return out


# --------------------------------------------------------------------------- part 2: ingest ceiling

class Producer:
    """The actor: returns the same pre-made batch array on every call."""

    def __init__(self, shape):
        self.batch = np.full(tuple(shape), 7, np.uint8)

    def ready(self) -> str:
        import ray
        return ray.get_runtime_context().get_node_id()

    def produce(self) -> np.ndarray:
        return self.batch


def _ingest_pool_cls():
    from hybridload.lanes.actor_pool import ActorPool

    class IngestPool(ActorPool):
        """hybridload's ActorPool with a Producer actor; convert copies as RayLane.convert does."""

        name = "ingest"

        def call(self, actor, task):
            return actor.produce.remote()

        def convert(self, raw):
            buf = torch.empty(raw.shape, dtype=torch.uint8)
            np.copyto(buf.numpy(), raw)  # one copy out of the object store into a torch buffer
            return buf

    return IngestPool


def _ingest_pool(pool, batches: int) -> int:
    """Scheduler + OrderedMerger over the pool, as hybridload/dataloader.py drives its lane."""
    from hybridload.merge import OrderedMerger
    from hybridload.scheduler import Scheduler
    from hybridload.stats import LoaderStats
    work = [np.arange(64, dtype=np.int64)] * batches
    merger = OrderedMerger(0, batches, max(2, 2 * pool.slots), 300.0)
    sched = Scheduler([pool], work, 0, 0, merger, LoaderStats())
    merger.describe = sched.where
    sched.pump()
    got = 0
    try:
        for _ in range(batches):
            got += merger.get(poll=sched.pump).shape[0] // 64
    finally:
        sched.stop()
        merger.close()
    return got


def _ingest_raw(ray, actor, batches: int, inflight: int, copy: bool) -> int:
    """ray.get in a loop, ``inflight`` calls outstanding; optionally the same copy as convert."""
    refs = deque(actor.produce.remote() for _ in range(min(inflight, batches)))
    submitted, got = len(refs), 0
    buf = None
    while refs:
        arr = ray.get(refs.popleft())
        if submitted < batches:
            refs.append(actor.produce.remote())
            submitted += 1
        if copy:
            buf = torch.empty(arr.shape, dtype=torch.uint8)
            np.copyto(buf.numpy(), arr)
        del arr
        got += 1
    del buf
    return got


def part_ingest(args) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    shape = (64, 3, args.size, args.size)
    nbytes = int(np.prod(shape))
    store = args.ingest_store_mb * MB
    t0 = time.perf_counter()
    cl = Cluster(initialize_head=True, connect=False,
                 head_node_args=dict(num_cpus=1, node_ip_address="127.0.0.1", object_store_memory=store,
                                     include_dashboard=False))
    pool = None
    per_round: dict[str, list[dict]] = {"hybridload ActorPool": [], "raw ray.get": [], "raw ray.get + copy": []}
    info: dict = {}
    try:
        cl.add_node(num_cpus=1, node_ip_address="127.0.0.1", object_store_memory=store)
        cl.wait_for_nodes()
        pool = _ingest_pool_cls()(Producer, (shape,), ray_address=cl.address, placement="remote-first",
                                  reserve_local_cpus=1, cpu_actors=1, tasks_per_actor=args.ingest_inflight)
        info["nodes"] = check_ray_loopback(ray)
        driver_node = ray.get_runtime_context().get_node_id()
        info["actor_on_other_node"] = pool.nodes[0] != driver_node
        if not info["actor_on_other_node"]:
            raise RuntimeError("the producer actor landed on the driver's node; the ingest test needs it remote")
        log.info("ingest: 2-node cluster on %s up in %.1f s; producer actor on the worker node; %d in flight, "
                 "%.1f MB per batch", info["nodes"], time.perf_counter() - t0, pool.slots, nbytes / 1e6)
        actor = pool.actors[0]
        runs = {"hybridload ActorPool": lambda k: _ingest_pool(pool, k),
                "raw ray.get": lambda k: _ingest_raw(ray, actor, k, args.ingest_inflight, False),
                "raw ray.get + copy": lambda k: _ingest_raw(ray, actor, k, args.ingest_inflight, True)}
        for name, fn in runs.items():  # warm-up
            fn(max(4, args.ingest_batches // 4))
        names = list(runs)
        for rnd in range(args.rounds):
            for name in rotate(names, rnd):
                r = timed(runs[name], args.ingest_batches)
                r["batches_per_s"] = r.pop("images_per_s")
                r["gb_per_s"] = r["batches_per_s"] * nbytes / 1e9
                per_round[name].append(r)
                log.info("ingest round %d/%d  %-20s %6.1f batches/s  %5.2f GB/s  (other load %s)", rnd + 1,
                         args.rounds, name, r["batches_per_s"], r["gb_per_s"], fmt(r["other_load"], ".2f"))
    finally:
        if pool is not None:
            pool.close()  # kills the actor, releases hybridload's connection (ray.shutdown)
        if ray.is_initialized():
            ray.shutdown()
        cl.shutdown()
    res = {}
    for name, rounds in per_round.items():
        if rounds:
            bps = [r["batches_per_s"] for r in rounds]
            res[name] = {"median_batches_per_s": statistics.median(bps), "min_batches_per_s": min(bps),
                         "max_batches_per_s": max(bps),
                         "median_gb_per_s": statistics.median(r["gb_per_s"] for r in rounds),
                         "median_other_load": statistics.median(r["other_load"] for r in rounds
                                                                if r["other_load"] is not None)
                         if any(r["other_load"] is not None for r in rounds) else None,
                         "rounds": rounds}
    rat = {}
    for a, b in (("hybridload ActorPool", "raw ray.get"), ("hybridload ActorPool", "raw ray.get + copy"),
                 ("raw ray.get + copy", "raw ray.get")):
        if a in res and b in res:
            pa = [x["batches_per_s"] / y["batches_per_s"] for x, y in zip(per_round[a], per_round[b])]
            rat[f"{a} / {b}"] = {"of_medians": res[a]["median_batches_per_s"] / res[b]["median_batches_per_s"],
                                 "paired_median": statistics.median(pa), "paired_min": min(pa),
                                 "paired_max": max(pa)}
    return {"batch_shape": list(shape), "batch_bytes": nbytes, "inflight": args.ingest_inflight,
            "batches_per_round": args.ingest_batches, "object_store_mb": args.ingest_store_mb, "info": info,
            "results": res, "ratios": rat}


# --------------------------------------------------------------------------- report

def report(args, env, loaders: dict | None, ingest: dict | None) -> str:
    out = [f"## bench_ray_lane: {args.n} photo JPEGs, imagenet_train({args.size}), batch {args.batch_size}, "
           f"{args.rounds} interleaved rounds (after {args.warmup_rounds} untimed)\n",
           f"Python {env['python']}, torch {env['torch']}, Ray {env.get('ray', 'n/a')}; {env['cpus']} CPUs usable; "
           f"load average {env['loadavg_start'][0]:.2f} at start, {env['loadavg_end'][0]:.2f} at end.\n"]
    if loaders:
        res = loaders["results"]
        out += ["| contestant | workers | median img/s | min | max | CPU util (process / with children) | "
                "other load | contended rounds |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for k, r in res.items():
            workers = loaders["cores"] if k.startswith("raw-kernels x") else (
                1 if k == "raw-kernels" else args.workers)
            derived = k.startswith("raw-kernels x")
            out.append(f"| {k} | {workers} | {r['median_images_per_s']:.0f} | {r['min_images_per_s']:.0f} | "
                       f"{r['max_images_per_s']:.0f} | "
                       + ("(derived: 1 thread x cores) | | |" if derived else
                          f"{r['median_cpu_util']:.2f} / {r['median_tree_cpu_util']:.2f} | "
                          f"{fmt(r['median_other_load'], '.2f')} | {r['contended_rounds']}/{len(r['rounds'])} |"))
        for k, why in loaders["skipped"].items():
            out.append(f"| {k} | | skipped: {why} | | | | | |")
        out += ["", "CPU util with children: this process plus its descendants (Ray's raylet and workers, the "
                "DataLoader's workers). Other load: cores used by everything else on the machine meanwhile "
                f"(/proc/stat); a round is contended when that exceeds the cores the contestant leaves free by "
                f"{OTHER_LOAD_WARN}.\n",
                "| ratio | of medians | per round: median (min-max) | goal | met |",
                "| --- | ---: | ---: | ---: | --- |"]
        for k, r in loaders["ratios"].items():
            g = GOALS.get(k)
            if r is None:
                out.append(f"| {k} | n/a | n/a | {'>= ' + str(g) if g else ''} | n/a |")
                continue
            met = "" if g is None else ("yes" if r["of_medians"] >= g else "**NO**")
            out.append(f"| {k} | {r['of_medians']:.2f}x | {r['paired_median']:.2f}x ({r['paired_min']:.2f}-"
                       f"{r['paired_max']:.2f}) | {'>= ' + str(g) if g else ''} | {met} |")
        out.append("")
    if ingest:
        out += [f"### Ingest ceiling: 2-node loopback cluster, one producer actor on the worker node, "
                f"{ingest['batch_bytes'] / 1e6:.1f} MB uint8 batches {tuple(ingest['batch_shape'])}, "
                f"{ingest['inflight']} in flight, {ingest['batches_per_round']} batches per round\n",
                "| path | median batches/s | min | max | median GB/s | other load |",
                "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for k, r in ingest["results"].items():
            out.append(f"| {k} | {r['median_batches_per_s']:.1f} | {r['min_batches_per_s']:.1f} | "
                       f"{r['max_batches_per_s']:.1f} | {r['median_gb_per_s']:.2f} | "
                       f"{fmt(r['median_other_load'], '.2f')} |")
        out += ["", "| ratio | of medians | per round: median (min-max) |", "| --- | ---: | ---: |"]
        for k, r in ingest["ratios"].items():
            out.append(f"| {k} | {r['of_medians']:.2f}x | {r['paired_median']:.2f}x ({r['paired_min']:.2f}-"
                       f"{r['paired_max']:.2f}) |")
        out.append("")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--root", type=Path, default=DEFAULT_PHOTO_ROOT,
                    help="where photo sets live; the set of N images is ROOT/nN (generated on first use)")
    ap.add_argument("--n", type=int, default=1024, help="number of images")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median reported)")
    ap.add_argument("--warmup-rounds", type=int, default=1, help="untimed rounds before the timed ones")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--size", type=int, default=224, help="output size of imagenet_train")
    ap.add_argument("--workers", type=int, default=2,
                    help="Ray actors / DataLoader workers / Ray Data CPUs / DALI threads")
    ap.add_argument("--contestants", default="hybridload,torch-dataloader,ray-data,dali,raw-kernels,raw-kernels-pool",
                    help="comma-separated subset to run")
    ap.add_argument("--object-store-mb", type=int, default=1024, help="object store of the embedded Ray")
    ap.add_argument("--ray-data-site", type=Path, default=REPO / "data" / "raydata-site",
                    help="a folder with pandas, pyarrow, pydantic (pip install --target) used when they are not installed")
    ap.add_argument("--ray-data-blocks", type=int, default=None,
                    help="override_num_blocks for read_binary_files (default: Ray Data's choice)")
    ap.add_argument("--ingest", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure the ingest ceiling on a simulated 2-node cluster")
    ap.add_argument("--loaders", action=argparse.BooleanOptionalAction, default=True,
                    help="run part 1 (the loaders side by side)")
    ap.add_argument("--ingest-batches", type=int, default=100, help="batches per ingest round")
    ap.add_argument("--ingest-inflight", type=int, default=2, help="calls in flight (ActorPool tasks_per_actor)")
    ap.add_argument("--ingest-store-mb", type=int, default=300, help="object store per node of the 2-node cluster")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    setup_logging()
    if min(args.n, args.rounds, args.batch_size, args.workers, args.ingest_batches, args.ingest_inflight) <= 0 \
            or args.warmup_rounds < 0:
        ap.error("counts must be positive (--warmup-rounds >= 0)")

    torch.set_num_threads(1)  # the raw kernel loop and the driver's copies use one core each
    folder, source = photo_source(args.root, args.n, log)
    rec = recipe.imagenet_train(args.size)
    env = {"python": platform.python_version(), "torch": torch.__version__, "cpus": usable_cpus(),
           "loadavg_start": os.getloadavg()}
    t_start = time.perf_counter()
    loaders = part_loaders(args, folder, source, rec) if args.loaders else None
    if loaders:
        env.update(loaders.pop("env"))
    t_mid = time.perf_counter()
    ingest = part_ingest(args) if args.ingest else None
    env["loadavg_end"] = os.getloadavg()
    env["seconds"] = {"loaders": t_mid - t_start, "ingest": time.perf_counter() - t_mid}
    log.info("done in %.1f s (loaders %.1f s, ingest %.1f s)", time.perf_counter() - t_start,
             *env["seconds"].values())
    sys.stdout.write(report(args, env, loaders, ingest))
    sys.stdout.flush()
    if args.out:
        doc = {"benchmark": "bench_ray_lane",
               "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
               "dataset": str(folder), "environment": env, "loaders": loaders, "ingest": ingest}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
