"""hybridload against the loaders users have today, in one run on the same photo JPEGs, the
same cores and the same recipe (imagenet_train(224), batch 64):

* hybridload, Ray lane (2 actors) and in-process lane (2 threads);
* torch DataLoader(num_workers=2) running the same kernels;
* Ray Data: read_binary_files + map_batches + iter_torch_batches, the same kernels;
* DALI alone: its CPU pipeline (decoders.image_random_crop + resize + crop_mirror_normalize);
* a Dpex-style loader written here: torch's DataLoader whose iterator sends each batch of its
  batch_sampler to a Ray *task* (dataset put once in the object store), keeps 2 x workers
  tasks in flight and yields them in order with ray.get — the way Dpex works.

    python benchmarks/peers.py [--n 1024] [--rounds 3] [--out out/peers.json] [--plot out/peers.png]
    python benchmarks/peers.py --quick      # a few batches, one round: the test that keeps it alive
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (DEFAULT_PHOTO_ROOT, check_ray_loopback, photo_set, ratio, rotate,  # noqa: E402
                     setup_logging, summarize)
from bench_ray_lane import (MB, Contestant, Dali, HybridRay, RayData, TorchDataLoader, _KernelDataset,  # noqa: E402
                            _EpochSampler, close_all, ray_data_available, time_epoch)

import torch  # noqa: E402
import torch.utils.data as tud  # noqa: E402

from hybridload import HybridLoader, LoaderPolicy, recipe, sources  # noqa: E402

log = logging.getLogger("peers")


class HybridInProcess(Contestant):
    name = "hybridload-inprocess"

    def __init__(self, source, rec, batch_size: int, threads: int):
        self.workers = threads
        self.loader = HybridLoader(source, rec, batch_size, policy=LoaderPolicy(cpu_actors=0, threads=threads),
                                   seed=0, device="cpu")

    def epoch(self, epoch: int) -> int:
        self.loader.set_epoch(epoch)
        return sum(images.shape[0] for images, _labels in self.loader)

    def close(self) -> None:
        self.loader.close()


def _fetch(dataset, indices):
    torch.set_num_threads(1)
    return tud.default_collate([dataset[i] for i in indices])


class DpexStyleLoader(tud.DataLoader):
    """torch's DataLoader with Ray tasks as workers (Dpex's design): in-order, 2 x workers in flight."""

    def __init__(self, dataset, *, ray_workers: int, **kw):
        super().__init__(dataset, num_workers=0, **kw)
        self.ray_workers = ray_workers
        self._dataset_ref = None

    def __iter__(self):
        import ray
        if self._dataset_ref is None:
            self._dataset_ref = ray.put(self.dataset)
        fetch = ray.remote(num_cpus=1)(_fetch)
        pending: deque = deque()
        for indices in self.batch_sampler:
            pending.append(fetch.remote(self._dataset_ref, indices))
            if len(pending) >= 2 * self.ray_workers:
                yield ray.get(pending.popleft(), timeout=300)
        while pending:
            yield ray.get(pending.popleft(), timeout=300)


class DpexStyle(Contestant):
    name = "dpex-style"

    def __init__(self, source, rec, batch_size: int, workers: int):
        self.workers = workers
        self.sampler = _EpochSampler(len(source))
        self.dl = DpexStyleLoader(_KernelDataset(source, rec), ray_workers=workers, batch_size=batch_size,
                                  sampler=self.sampler)

    def epoch(self, epoch: int) -> int:
        self.sampler.ep = epoch
        return sum(images.shape[0] for images, _labels in self.dl)


def _x(r: dict | None) -> str:
    return "" if r is None else f"{r['of_medians']:.2f}x"


def plot(results: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(results)
    rates = [results[n]["median_images_per_s"] for n in names]
    fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
    colors = ["tab:green" if n.startswith("hybridload") else "tab:gray" for n in names]
    bars = ax.bar(names, rates, color=colors)
    for b, r in zip(bars, rates):
        ax.annotate(f"{r:.0f}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("images/s (median of rounds)")
    ax.set_title("decode + RandomResizedCrop(224) + flip, same 2 cores", fontsize=10)
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=DEFAULT_PHOTO_ROOT)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup-rounds", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="64 images, batch 16, one round: a smoke run")
    ap.add_argument("--out", default=None)
    ap.add_argument("--plot", default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.batch_size, args.rounds, args.warmup_rounds = 64, 16, 1, 0
    setup_logging()
    import ray
    folder = photo_set(args.root, args.n, log)
    source, rec = sources.ImageFolder(folder), recipe.imagenet_train(224)
    contestants: list[Contestant] = []
    skipped = {}
    try:
        tdl = TorchDataLoader(source, rec, args.batch_size, args.workers)
        tdl.warmup(10_000)  # fork its workers before Ray's threads exist
        contestants.append(tdl)
        ray.init(address="local", num_cpus=2 * args.workers, include_dashboard=False, _node_ip_address="127.0.0.1",
                 object_store_memory=512 * MB, logging_level=logging.WARNING, log_to_driver=False)
        check_ray_loopback(ray)
        for make in (lambda: HybridRay(source, rec, args.batch_size, args.workers),
                     lambda: HybridInProcess(source, rec, args.batch_size, args.workers),
                     lambda: DpexStyle(source, rec, args.batch_size, args.workers)):
            c = make()
            c.warmup(10_000)
            contestants.append(c)
        why = ray_data_available(None)
        if why:
            skipped["ray-data"] = why
        else:
            rd = RayData(source, rec, args.batch_size, args.workers, None)
            rd.warmup(10_000)
            contestants.append(rd)
        d = Dali(folder, args.n, args.workers, args.batch_size, 224)
        d.warmup(0)
        contestants.append(d)
        per_round = {c.name: [] for c in contestants}
        for rnd in range(-args.warmup_rounds, args.rounds):
            for c in rotate(contestants, rnd):
                r = time_epoch(c, 20_000 + rnd if rnd < 0 else rnd)
                if rnd >= 0:
                    per_round[c.name].append(r)
                    log.info("round %d %-22s %7.0f img/s", rnd + 1, c.name, r["images_per_s"])
    finally:
        close_all(contestants)
        if ray.is_initialized():
            ray.shutdown()
    results = {name: summarize(rounds, args.workers) for name, rounds in per_round.items() if rounds}
    peers = [n for n in results if not n.startswith("hybridload")]
    lines = ["| loader | median images/s | hybridload (Ray lane) / it | hybridload (in-process) / it |",
             "| --- | ---: | ---: | ---: |"]
    for name in results:
        a = ratio(results, "hybridload", name) if name in peers else None
        b = ratio(results, "hybridload-inprocess", name) if name in peers else None
        lines.append(f"| {name} | {results[name]['median_images_per_s']:.0f} | {_x(a)} | {_x(b)} |")
    sys.stdout.write(f"## peers: {args.n} photo JPEGs, batch {args.batch_size}, {args.workers} workers each, "
                     f"{args.rounds} round(s)\n\n" + "\n".join(lines) + "\n")
    if skipped:
        sys.stdout.write(f"\nskipped: {skipped}\n")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"results": results, "skipped": skipped, "n": args.n, "batch_size": args.batch_size}, f,
                      indent=2, default=str)
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
