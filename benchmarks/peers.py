"""hybridload against the loaders users have today, in one run on the same photo JPEGs, the
same cores and the same recipe (imagenet_train(224), batch 64):

hybridload (Ray lane, 2 actors; in-process lane, 2 threads); torch DataLoader(num_workers=2)
on the same kernels; Ray Data (read_binary_files + map_batches + iter_torch_batches, skipped when
not installed); DALI alone (CPU pipeline); a Dpex-style loader: a DataLoader whose iterator sends
each batch to a Ray task (dataset put once), 2 x workers in flight, yielded in order with ray.get.
Each round runs every contestant over ``--batches`` batches (default: all; method: _harness.py);
reported: median images/s and the ratios hybridload / peer.

    python benchmarks/peers.py [--n 1024] [--rounds 3] [--batches 16] [--out out/peers.json] [--plot out/peers.png]
    python benchmarks/peers.py --quick      # 128 images, 2 batches of 64, one round: the smoke test
"""

from __future__ import annotations

import logging
import sys
from collections import deque
from pathlib import Path

import torch
import torch.utils.data as tud

import _harness as h
from _contestants import DaliFiles, EpochSampler, KernelDataset, Loader, RayData, TorchDataLoader, ray_data_missing
from _data import parser, photo_source, start_local_ray, subset
from hybridload import LoaderPolicy, recipe

log = logging.getLogger("peers")
CONTESTANTS = ("hybridload", "hybridload-inprocess", "torch-dataloader", "dpex-style", "ray-data", "dali")


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


class DpexStyle(h.Contestant):
    name = "dpex-style"

    def __init__(self, source, rec, batch_size: int, workers: int):
        self.threads, self.sampler = workers, EpochSampler(len(source))
        self.dl = DpexStyleLoader(KernelDataset(source, rec), ray_workers=workers, batch_size=batch_size,
                                  sampler=self.sampler)

    def run(self, epoch: int) -> int:
        self.sampler.epoch = epoch
        return sum(images.shape[0] for images, _labels in self.dl)


def plot(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(results)
    rates = [results[n]["median_images_per_s"] for n in names]
    fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
    bars = ax.bar(names, rates, color=["tab:green" if n.startswith("hybridload") else "tab:gray" for n in names])
    for b, r in zip(bars, rates):
        ax.annotate(f"{r:.0f}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("images/s (median of rounds)")
    ax.set_title("decode + RandomResizedCrop(224) + flip, same 2 cores", fontsize=10)
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    ap = parser(__doc__, rounds=3, quick="128 images, 2 batches of 64 per contestant, one round, no warm-up round")
    ap.add_argument("--batches", type=int, default=None,
                    help="batches per contestant per round (default: the whole set, ceil(n / batch size))")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2,
                    help="Ray actors / in-process threads / DataLoader workers / Ray tasks / Ray Data CPUs / DALI threads")
    ap.add_argument("--contestants", default=",".join(CONTESTANTS), help="comma-separated subset to run")
    ap.add_argument("--object-store-mb", type=int, default=512, help="object store of the embedded Ray")
    ap.add_argument("--plot", type=Path, default=None, help="write a bar chart (PNG) here")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.batch_size, args.batches, args.rounds, args.warmup_rounds = 128, 64, 2, 1, 0
    names = [c for c in args.contestants.split(",") if c]
    if set(names) - set(CONTESTANTS):
        ap.error(f"unknown contestants {sorted(set(names) - set(CONTESTANTS))}; known: {', '.join(CONTESTANTS)}")
    if min(args.n, args.rounds, args.batch_size, args.workers, args.batches or 1) <= 0 or args.warmup_rounds < 0:
        ap.error("counts must be positive (--warmup-rounds >= 0)")
    if args.batches is not None and args.batches > args.n // args.batch_size:
        ap.error(f"--batches {args.batches} needs {args.batches * args.batch_size} images; --n is {args.n}")
    batches = -(-args.n // args.batch_size) if args.batches is None else args.batches
    images = args.n if args.batches is None else batches * args.batch_size
    h.setup_logging()
    torch.set_num_threads(1)
    import ray
    folder, whole = photo_source(args.root, args.n, log)
    source, rec, B, W = subset(whole, images), recipe.imagenet_train(224), args.batch_size, args.workers
    env, cs, skipped = h.environment(ray=ray.__version__), [], {}
    try:
        if "torch-dataloader" in names:  # forks its workers before Ray's threads exist
            cs.append(TorchDataLoader(source, rec, B, W))
            h.warm_up(cs, log=log)
        env["ray_nodes"] = start_local_ray(2 * W, args.object_store_mb, log)
        makers = {"hybridload": lambda: Loader("hybridload", source, rec, B, LoaderPolicy(ray_address="embedded", 
                      mode="cpu", cpu_actors=W, reserve_local_cpus=0, placement="any"), W),
                  "hybridload-inprocess": lambda: Loader("hybridload-inprocess", source, rec, B,
                                                         LoaderPolicy(cpu_actors=0, threads=W), W),
                  "dpex-style": lambda: DpexStyle(source, rec, B, W),
                  "ray-data": lambda: RayData(source, rec, B, W),
                  "dali": lambda: DaliFiles(folder, args.n, W, B, 224, iterations=batches)}
        if "ray-data" in names and ray_data_missing():
            skipped["ray-data"] = ray_data_missing()
            log.warning("skipping Ray Data: %s", skipped["ray-data"])
        new = []
        for name in (n for n in makers if n in names and n not in skipped):
            try:
                new.append(makers[name]())
            except ImportError as exc:
                skipped[name] = str(exc)
        h.warm_up(new, log=log)
        cs += new
        per_round = h.run_rounds(cs, args.rounds, args.warmup_rounds, expect=images, log=log)
    finally:
        h.close_all(cs, log)
        if ray.is_initialized():
            ray.shutdown()
    results = h.summarize_all(per_round, cs)
    peers = [n for n in results if not n.startswith("hybridload")]
    ratios = {f"{a} / {p}": h.ratio(results, a, p) for a in ("hybridload", "hybridload-inprocess") for p in peers
              if a in results}

    lines = [f"## peers: {images} of {args.n} photo JPEGs per round ({batches} batches of {B}), imagenet_train(224), "
             f"{W} workers each, {args.rounds} interleaved round(s) after {args.warmup_rounds} untimed\n",
             h.environment_line(env),
             *h.results_table(results, ("median", ("min-max", lambda r: f"{r['min_images_per_s']:.0f}-"
                                                                        f"{r['max_images_per_s']:.0f}"), "other",
                                        "contended"),
                              first="loader", skipped=skipped), "", *h.ratio_table(ratios), ""]
    h.emit(lines, args, {"benchmark": "peers", "batches_per_round": batches, "images_per_round": images,
                         "dataset": str(folder), "environment": env, "results": results, "ratios": ratios,
                         "skipped": skipped}, log)
    if args.plot:
        plot(results, args.plot)
        log.info("wrote %s", args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
