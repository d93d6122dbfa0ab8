"""hybridload against the loaders users have today, in one run on the same photo JPEGs, the
same cores and the same recipe (imagenet_train(224), batch 64):

* hybridload, Ray lane (2 actors) and in-process lane (2 threads);
* torch DataLoader(num_workers=2) running the same kernels;
* Ray Data: read_binary_files + map_batches + iter_torch_batches, the same kernels;
* DALI alone: its CPU pipeline (decoders.image_random_crop + resize + crop_mirror_normalize);
* a Dpex-style loader written here: torch's DataLoader whose iterator sends each batch of its
  batch_sampler to a Ray *task* (dataset put once in the object store), keeps 2 x workers
  tasks in flight and yields them in order with ray.get — the way Dpex works.

Every round runs each contestant over ``--batches`` batches (default: the whole set; who goes
first rotates), after an untimed warm-up; reported: the median images/s over the rounds and the
ratios hybridload / peer (of the medians, and the median of the per-round ratios).

    python benchmarks/peers.py [--n 1024] [--rounds 3] [--batches 16] [--out out/peers.json] [--plot out/peers.png]
    python benchmarks/peers.py --quick      # 128 images, 2 batches of 64, one round: the smoke test
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (DEFAULT_PHOTO_ROOT, check_ray_loopback, fmt, photo_source, ray_loopback_env, ratio,  # noqa: E402
                     rotate, setup_logging, summarize, usable_cpus)

ray_loopback_env()  # before anything imports ray
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


def _fetch(dataset, indices, collate):
    """The Ray task: ``collate([dataset[i] for i in indices])`` (one thread, as a torch worker)."""
    torch.set_num_threads(1)
    return collate([dataset[i] for i in indices])


_FETCH = None


def _remote_fetch():
    global _FETCH
    if _FETCH is None:
        import ray
        _FETCH = ray.remote(num_cpus=1)(_fetch)
    return _FETCH


class DpexStyleLoader(tud.DataLoader):
    """torch's DataLoader with Ray tasks as workers (Dpex's design): each batch of the
    batch_sampler is one task over the dataset put once in the object store; up to
    2 x workers tasks in flight; batches yielded in sampler order with ray.get."""

    def __init__(self, dataset, *, ray_workers: int, **kw):
        super().__init__(dataset, num_workers=0, **kw)
        self.ray_workers = ray_workers
        self._dataset_ref = None

    def __iter__(self):
        import ray
        if self._dataset_ref is None:
            self._dataset_ref = ray.put(self.dataset)
        fetch = _remote_fetch()
        pending: deque = deque()
        try:
            for indices in self.batch_sampler:
                pending.append(fetch.remote(self._dataset_ref, list(indices), self.collate_fn))
                if len(pending) >= 2 * self.ray_workers:
                    yield ray.get(pending.popleft(), timeout=300)
            while pending:
                yield ray.get(pending.popleft(), timeout=300)
        finally:
            for ref in pending:  # an iterator left early: do not leave tasks running
                ray.cancel(ref)


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


def _subset(source, count: int):
    """The first ``count`` images of ``source`` (the set a round covers with --batches)."""
    if count >= len(source):
        return source
    refs = [source.ref(i) for i in range(count)]
    return sources.FileList([r.location for r in refs], [r.label for r in refs])


CONTESTANTS = ("hybridload", "hybridload-inprocess", "torch-dataloader", "dpex-style", "ray-data", "dali")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--root", type=Path, default=DEFAULT_PHOTO_ROOT,
                    help="where photo sets live; the set of N images is ROOT/nN (generated on first use)")
    ap.add_argument("--n", type=int, default=1024, help="number of photo JPEGs in the set")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timed rounds (median reported)")
    ap.add_argument("--warmup-rounds", type=int, default=1, help="untimed rounds before the timed ones")
    ap.add_argument("--batches", type=int, default=None,
                    help="batches per contestant per round (default: the whole set, ceil(n / batch size))")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2,
                    help="Ray actors / in-process threads / DataLoader workers / Ray tasks / Ray Data CPUs / "
                         "DALI threads")
    ap.add_argument("--contestants", default=",".join(CONTESTANTS), help="comma-separated subset to run")
    ap.add_argument("--ray-data-site", type=Path, default=None,
                    help="a folder with pandas, pyarrow, pydantic used when they are not installed "
                         "(see bench_ray_lane.py)")
    ap.add_argument("--object-store-mb", type=int, default=512, help="object store of the embedded Ray")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 128 images, 2 batches of 64 per contestant, one round, no warm-up round")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument("--plot", type=Path, default=None, help="write a bar chart (PNG) here")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.batch_size, args.batches, args.rounds, args.warmup_rounds = 128, 64, 2, 1, 0
    names = [c for c in args.contestants.split(",") if c]
    if set(names) - set(CONTESTANTS):
        ap.error(f"unknown contestants {sorted(set(names) - set(CONTESTANTS))}; known: {', '.join(CONTESTANTS)}")
    if min(args.n, args.rounds, args.batch_size, args.workers) <= 0 or args.warmup_rounds < 0 \
            or (args.batches is not None and args.batches <= 0):
        ap.error("counts must be positive (--warmup-rounds >= 0)")
    full = -(-args.n // args.batch_size)
    if args.batches is not None and args.batches > args.n // args.batch_size:
        ap.error(f"--batches {args.batches} needs {args.batches * args.batch_size} images; --n is {args.n}")
    batches = full if args.batches is None else args.batches
    per_round_images = args.n if args.batches is None else batches * args.batch_size
    setup_logging()
    torch.set_num_threads(1)
    import ray
    folder, whole = photo_source(args.root, args.n, log)
    source, rec = _subset(whole, per_round_images), recipe.imagenet_train(224)
    env = {"python": platform.python_version(), "torch": torch.__version__, "ray": ray.__version__,
           "cpus": usable_cpus(), "loadavg_start": os.getloadavg()}
    contestants: list[Contestant] = []
    skipped: dict[str, str] = {}
    per_round: dict[str, list[dict]] = {}
    t_start = time.perf_counter()
    try:
        if "torch-dataloader" in names:
            tdl = TorchDataLoader(source, rec, args.batch_size, args.workers)
            tdl.warmup(10_000)  # fork its workers before Ray's threads exist
            contestants.append(tdl)
        ray.init(address="local", num_cpus=2 * args.workers, include_dashboard=False, _node_ip_address="127.0.0.1",
                 object_store_memory=args.object_store_mb * MB, logging_level=logging.WARNING, log_to_driver=False)
        env["ray_nodes"] = check_ray_loopback(ray)
        makers = {"hybridload": lambda: HybridRay(source, rec, args.batch_size, args.workers),
                  "hybridload-inprocess": lambda: HybridInProcess(source, rec, args.batch_size, args.workers),
                  "dpex-style": lambda: DpexStyle(source, rec, args.batch_size, args.workers)}
        for name, make in makers.items():
            if name in names:
                c = make()
                c.warmup(10_000)
                contestants.append(c)
        if "ray-data" in names:
            why = ray_data_available(args.ray_data_site)
            if why:
                skipped["ray-data"] = why
            else:
                rd = RayData(source, rec, args.batch_size, args.workers, None)
                rd.warmup(10_000)
                contestants.append(rd)
        if "dali" in names:
            try:
                d = Dali(folder, args.n, args.workers, args.batch_size, 224)
            except ImportError as exc:
                skipped["dali"] = str(exc)
            else:
                d.pipe.iterations = batches  # readers.file over the folder, `batches` iterations per round
                d.warmup(0)
                contestants.append(d)
        per_round = {c.name: [] for c in contestants}
        log.info("%d contestants, %d batches of %d each per round: %s", len(contestants), batches, args.batch_size,
                 ", ".join(c.name for c in contestants))
        for rnd in range(-args.warmup_rounds, args.rounds):
            for c in rotate(contestants, rnd):
                r = time_epoch(c, 20_000 + rnd if rnd < 0 else rnd)
                if rnd < 0:
                    continue
                if r["images"] < per_round_images:
                    raise RuntimeError(f"{c.name} produced {r['images']} images, expected {per_round_images}")
                per_round[c.name].append(r)
                log.info("round %d/%d %-22s %7.0f img/s (other load %s)", rnd + 1, args.rounds, c.name,
                         r["images_per_s"], fmt(r["other_load"], ".2f"))
    finally:
        close_all(contestants)
        if ray.is_initialized():
            ray.shutdown()
    env["loadavg_end"] = os.getloadavg()
    env["seconds"] = time.perf_counter() - t_start
    results = {name: summarize(rounds, args.workers) for name, rounds in per_round.items() if rounds}
    peers = [n for n in results if not n.startswith("hybridload")]
    ratios = {f"{a} / {p}": ratio(results, a, p) for a in ("hybridload", "hybridload-inprocess") for p in peers
              if a in results}
    lines = [f"## peers: {per_round_images} of {args.n} photo JPEGs per round ({batches} batches of "
             f"{args.batch_size}), imagenet_train(224), {args.workers} workers each, {args.rounds} interleaved "
             f"round(s) after {args.warmup_rounds} untimed; {env['cpus']} CPUs, load average "
             f"{env['loadavg_start'][0]:.2f} -> {env['loadavg_end'][0]:.2f}", "",
             "| loader | median images/s | min-max | other load | hybridload (Ray lane) / it | "
             "hybridload (in-process) / it |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in results.items():
        a, b = ratios.get(f"hybridload / {name}"), ratios.get(f"hybridload-inprocess / {name}")
        lines.append(f"| {name} | {r['median_images_per_s']:.0f} | {r['min_images_per_s']:.0f}-"
                     f"{r['max_images_per_s']:.0f} | {fmt(r['median_other_load'], '.2f')} | {_x(a)} | {_x(b)} |")
    for name, why in skipped.items():
        lines.append(f"| {name} | skipped: {why} | | | | |")
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        doc = {"benchmark": "peers", "config": config,
               "n": args.n, "batch_size": args.batch_size, "batches_per_round": batches,
               "images_per_round": per_round_images, "dataset": str(folder), "environment": env,
               "results": results, "ratios": ratios, "skipped": skipped}
        args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        log.info("wrote %s", args.out)
    if args.plot:
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        plot(results, str(args.plot))
        log.info("wrote %s", args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
