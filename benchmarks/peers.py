"""hybridload against the loaders users have today, in one run on the same photo JPEGs, the
same cores and the same recipe (imagenet_train(224), batch 64):

hybridload (Ray lane, 2 actors; in-process lane, 2 threads; process lane, 2 workers); torch
DataLoader(num_workers=2) on the same kernels; Ray Data (read_binary_files + map_batches +
iter_torch_batches, skipped when not installed); DALI alone (CPU pipeline); a Dpex-style
loader: a DataLoader whose iterator sends each batch to a Ray task (dataset put once), 2 x
workers in flight, yielded in order with ray.get; and torch's DataLoader, torchdata.nodes and
SPDL each running the Pillow pipeline their users write (``torch-pil``, ``torchdata-nodes``,
``spdl``; _peer_loaders.py).
Each round runs every contestant over ``--batches`` batches (default: all; method: _harness.py);
reported: median images/s and the ratios hybridload / peer.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import deque
from pathlib import Path

import torch
import torch.utils.data as tud

import _harness as h
from _contestants import DaliFiles, KernelBatches, KernelDataset, Loader, RayData, SampledLoader, torch_loader
from _data import embedded_ray, parser, photo_source
from _peer_loaders import Spdl, TorchdataNodes, torch_pil
from hybridload import LoaderPolicy, recipe, sources

log = logging.getLogger("peers")
CONTESTANTS = ("hybridload", "hybridload-inprocess", "hybridload-processes", "torch-dataloader", "dpex-style")
CONTESTANTS += ("ray-data", "dali", "torch-pil", "torchdata-nodes", "spdl")
FORKS = {
    "torch-dataloader",
    "hybridload-processes",
    "torch-pil",
}  # fork their workers: built and warmed up before Ray starts
NEEDS_RAY = {"hybridload", "dpex-style", "ray-data"}


def fetch(dataset, indices, collate):
    """The Ray task: ``collate([dataset[i] for i in indices])`` (one thread, as a torch worker)."""
    torch.set_num_threads(1)
    return collate([dataset[i] for i in indices])


class DpexStyleLoader(tud.DataLoader):
    """torch's DataLoader with Ray tasks as workers (Dpex's design): each batch of the
    batch_sampler is one task over the dataset put once in the object store; up to
    2 x workers tasks in flight; batches yielded in sampler order with ray.get."""

    def __init__(self, dataset, *, ray_workers: int, **kw):
        super().__init__(dataset, num_workers=0, **kw)
        self.ray_workers, self.dataset_ref, self.fetch = ray_workers, None, None

    def __iter__(self):
        import ray

        if self.dataset_ref is None:
            self.dataset_ref, self.fetch = ray.put(self.dataset), ray.remote(num_cpus=1)(fetch)
        pending: deque = deque()
        try:
            for indices in self.batch_sampler:
                pending.append(self.fetch.remote(self.dataset_ref, list(indices), self.collate_fn))
                if len(pending) >= 2 * self.ray_workers:
                    yield ray.get(pending.popleft(), timeout=300)
            while pending:
                yield ray.get(pending.popleft(), timeout=300)
        finally:
            for ref in pending:  # an iterator left early: do not leave tasks running
                ray.cancel(ref)


def plot(results: dict, path: Path) -> None:
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, nothing global to close

    names = list(results)
    rates = [results[n]["median_images_per_s"] for n in names]
    ax = Figure(figsize=(8, 4), dpi=110).subplots()
    bars = ax.bar(names, rates, color=["tab:green" if n.startswith("hybridload") else "tab:gray" for n in names])
    for b, r in zip(bars, rates):
        ax.annotate(f"{r:.0f}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("images/s (median of rounds)")
    ax.set_title("decode + RandomResizedCrop(224) + flip, same 2 cores", fontsize=10)
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    ax.figure.savefig(path)


def run_contest(
    args, log: logging.Logger, *, batches: int | None = None, size: int = 224
) -> tuple[Path, dict, dict, dict]:
    """Each loader of ``args.contestants`` over the first ``batches`` x ``args.batch_size`` photos
    (default: all ``args.n``), imagenet_train(size), ``args.workers`` workers each, in interleaved rounds; one that cannot be imported is skipped. Returns
    (photo folder, environment, results, {skipped name: why})."""
    import ray

    torch.set_num_threads(1)  # the raw kernel loop and the driver's copies use one core each
    folder, whole = photo_source(args.root, args.n, log)
    B, W = args.batch_size, args.workers
    images = args.n if batches is None else batches * B
    refs = [whole.ref(i) for i in range(images)]  # the first ``images`` photos
    source = sources.FileList([r.location for r in refs], [r.label for r in refs])
    rec = recipe.imagenet_train(size)
    ray_lane = LoaderPolicy(ray_address="embedded", mode="cpu", cpu_actors=W, reserve_local_cpus=0, placement="any")
    makers = {
        "hybridload": lambda: Loader("hybridload", source, rec, B, ray_lane, W),
        "hybridload-inprocess": lambda: Loader(
            "hybridload-inprocess", source, rec, B, LoaderPolicy(cpu_actors=0, threads=W), W
        ),
        "hybridload-processes": lambda: Loader(
            "hybridload-processes", source, rec, B, LoaderPolicy(cpu_actors=0, threads=W, local_workers="processes"), W
        ),
        "torch-dataloader": lambda: SampledLoader(
            "torch-dataloader", KernelDataset(source, rec), W, torch_loader(B, W)
        ),
        "dpex-style": lambda: SampledLoader(
            "dpex-style",
            KernelDataset(source, rec),
            W,
            lambda ds, sampler: DpexStyleLoader(ds, ray_workers=W, batch_size=B, sampler=sampler),
        ),
        "ray-data": lambda: RayData(source, rec, B, W),
        "dali": lambda: DaliFiles(folder, args.n, W, B, size, iterations=batches),
        "torch-pil": lambda: torch_pil("torch-pil", source, rec, B, W),  # their own Pillow pipelines
        "torchdata-nodes": lambda: TorchdataNodes("torchdata-nodes", source, rec, B, W),
        "spdl": lambda: Spdl("spdl", source, rec, B, W),
        "raw-kernels": lambda: KernelBatches("raw-kernels", source, rec, B),
        "raw-kernels-pool": lambda: KernelBatches("raw-kernels-pool", source, rec, B, threads=W, pooled=True),
    }
    env, chosen, built, skipped = h.environment(), [k for k in makers if k in args.contestants], {}, {}
    try:  # build and warm up each (those that fork first, then an embedded Ray if one needs it)
        for k in sorted(chosen, key=lambda k: k not in FORKS):
            if k not in FORKS and NEEDS_RAY & set(chosen) and not ray.is_initialized():
                t0 = time.perf_counter()
                env["ray_nodes"], env["ray"] = embedded_ray(2 * W, args.object_store_mb), ray.__version__
                log.info(
                    "Ray %s started on %s in %.1f s (%d logical CPUs)",
                    env["ray"],
                    env["ray_nodes"],
                    time.perf_counter() - t0,
                    2 * W,
                )
            try:
                built[k] = makers[k]()
                h.warm_up([built[k]], log=log)
            except ImportError as exc:  # not installed here: skipped
                h.close_all([built.pop(k)] if k in built else [], log)
                skipped[k] = str(exc)
                log.warning("skipping %s: %s", k, exc)
        cs = [built[k] for k in chosen if k in built]
        per_round = h.run_rounds(cs, args.rounds, args.warmup_rounds, expect=images, log=log)
        if "hybridload" in per_round:
            env["hybridload_lanes"] = {k: v["images"] for k, v in built["hybridload"].loader.stats()["lanes"].items()}
    finally:
        h.close_all(list(built.values()), log)
        if ray.is_initialized():
            ray.shutdown()
    return folder, env, h.summarize_all(per_round, cs), skipped


def main(argv=None) -> int:
    ap = parser(
        __doc__,
        rounds=3,
        quick=dict(n=128, batch_size=64, batches=2, rounds=1, warmup_rounds=0),
        contestants=CONTESTANTS,
        batch_size=64,
        workers=2,
        object_store_mb=512,
        plot=None,
    )
    ap.add_argument(
        "--batches",
        type=int,
        default=None,
        help="batches per contestant per round (default: the whole set, ceil(n / batch size))",
    )
    args = ap.parse_args(argv)
    if args.batches is not None and args.batches > args.n // args.batch_size:
        ap.error(f"--batches {args.batches} needs {args.batches * args.batch_size} images; --n is {args.n}")
    batches = -(-args.n // args.batch_size) if args.batches is None else args.batches
    images = args.n if args.batches is None else batches * args.batch_size
    B, W = args.batch_size, args.workers
    folder, env, results, skipped = run_contest(args, log, batches=args.batches)
    peers = [n for n in results if not n.startswith("hybridload")]
    local = ("hybridload-inprocess", "hybridload-processes")
    ratios = {f"{a} / {p}": h.ratio(results, a, p) for a in ("hybridload", *local) for p in peers if a in results}
    ratios.update(
        {f"hybridload / {a}": h.ratio(results, "hybridload", a) for a in local if {a, "hybridload"} <= set(results)}
    )
    min_max = ("min-max", lambda r: f"{r['min_images_per_s']:.0f}-{r['max_images_per_s']:.0f}")
    lines = [
        f"## peers: {images} of {args.n} photo JPEGs per round ({batches} batches of {B}), imagenet_train(224), "
        f"{W} workers each, {args.rounds} interleaved round(s) after {args.warmup_rounds} untimed\n",
        h.environment_line(env),
        *h.results_table(results, ("median", min_max, "other", "contended"), first="loader", skipped=skipped),
        "",
        *h.ratio_table(ratios),
        "",
    ]
    h.emit(
        lines,
        args,
        {
            "benchmark": "peers",
            "batches_per_round": batches,
            "images_per_round": images,
            "dataset": str(folder),
            "environment": env,
            "results": results,
            "ratios": ratios,
            "skipped": skipped,
        },
        log,
    )
    if args.plot:
        plot(results, args.plot)
        log.info("wrote %s", args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
