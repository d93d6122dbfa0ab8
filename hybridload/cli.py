"""The ``hybridload`` command line: ``demo``, ``profile`` and ``bench``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

log = logging.getLogger("hybridload.cli")


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    lines = [f"| {'what'.ljust(width)} | value |", f"| {'-' * width} | ----- |"]
    lines += [f"| {k.ljust(width)} | {v} |" for k, v in rows]
    return "\n".join(lines) + "\n"


def cmd_demo(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from hybridload import HybridLoader, LoaderPolicy, recipe, sources
    from hybridload.datasets import make_photo_folder

    root = Path(args.data)
    log.info("preparing %d photo JPEGs under %s", args.images, root)
    try:
        make_photo_folder(root, args.images, num_classes=args.classes)
    except ValueError as exc:  # an existing directory the demo did not make: never written into
        raise SystemExit(f"hybridload demo: {exc}") from None
    src = sources.ImageFolder(root)
    rec = recipe.imagenet_train(args.size)
    if args.in_process:
        policy = LoaderPolicy(mode=args.mode, gpu_share=0.5 if args.mode == "split" else None, cpu_actors=0,
                              threads=args.threads)
    else:  # the default: the CPU lane on this machine without Ray (--ray: Ray actors), DALI (GPU, else CPU-only)
        policy = LoaderPolicy(mode=args.mode, gpu_share=0.5 if args.mode == "split" else None,
                              reserve_local_cpus=0, placement="any",
                              ray_address=(os.environ.get("RAY_ADDRESS") or "embedded") if args.ray else None)
    rows = []
    with HybridLoader(src, rec, args.batch_size, policy=policy, seed=0) as loader:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            n, t0 = 0, time.perf_counter()
            for images, _labels in tqdm(loader, desc=f"epoch {epoch}", unit="batch", disable=args.quiet):
                n += images.shape[0]
            dt = time.perf_counter() - t0
            note = " (includes start-up)" if epoch == 0 else ""
            rows.append((f"epoch {epoch} images/s{note}", f"{n / dt:.0f} ({n} images in {dt:.2f} s)"))
        st = loader.stats()
        ran = loader.describe_lanes()
    rows += [("lane shares", ", ".join(f"{k}: {v['share']:.0%}" for k, v in st["lanes"].items())),
             ("what ran", ran), ("GPU share (auto)", f"{st['plan']['gpu_share']:.2f}"),
             ("batch", f"{args.batch_size} x {tuple(images.shape[1:])} {images.dtype}"),
             ("consumer waited", f"{st['stall_s']:.2f} s"),
             ("skipped samples", str(st["skipped"])), ("retries", str(st["retries"]))]
    sys.stdout.write(_table(rows))
    return 0


def _recipe(spec: str):
    from hybridload import recipe
    name, _, size = spec.partition(":")
    makers = {"imagenet_train": recipe.imagenet_train, "imagenet_eval": recipe.imagenet_eval}
    if name not in makers:
        raise SystemExit(f"--recipe must be imagenet_train[:SIZE] or imagenet_eval[:SIZE], got {spec!r}")
    try:
        return makers[name](int(size) if size else 224)
    except ValueError as exc:
        raise SystemExit(f"--recipe {spec!r}: {exc}") from None


def cmd_profile(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from hybridload import sources
    from hybridload.planner.profile import plot_profile, run_profile

    src = sources.ImageFolder(args.data)
    rec = _recipe(args.recipe)
    steps = 5 + (1 if args.ray_address else 0) + (0 if args.no_check else 2)
    with tqdm(total=steps, desc="profiling", unit="step", disable=args.quiet) as bar:
        def progress(msg):
            bar.set_postfix_str(msg)
            bar.update(1)
        prof = run_profile(src, rec, batch_size=args.batch_size, seconds=args.seconds, sample=args.sample,
                           max_gpu_util=args.max_gpu_util, reserve_local_cpus=args.reserve_local_cpus,
                           demand=args.demand, gpu_threads=args.gpu_threads, ray_address=args.ray_address,
                           check_points=not args.no_check, progress=progress)
        bar.update(bar.total - bar.n)
    prof.plan.save(args.out)
    if args.plot:
        plot_profile(prof, args.plot)
    rows = prof.rows + [("plan file", args.out)] + ([("plot", args.plot)] if args.plot else []) + \
        [("profile took", f"{prof.seconds:.1f} s")]
    sys.stdout.write(_table(rows))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import json

    from tqdm import tqdm

    from hybridload import sources
    from hybridload.bench import MODES, as_json, plot_results, run_mode
    from hybridload.planner import Plan

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise SystemExit(f"--modes: unknown {bad}; choose from {', '.join(MODES)}")
    plan = Plan.load(args.plan) if args.plan else None
    src = sources.ImageFolder(args.data)
    rec = _recipe(args.recipe)
    results = []
    with tqdm(total=args.batches * len(modes), desc="bench", unit="batch", disable=args.quiet) as bar:
        for mode in modes:
            bar.set_postfix_str(mode)
            results.append(run_mode(src, rec, mode, batch_size=args.batch_size, batches=args.batches,
                                    step_ms=args.step_ms, plan=plan, ray_address=args.ray_address,
                                    threads=args.threads, progress=bar.update))
    meta = {"data": args.data, "recipe": args.recipe, "batch_size": args.batch_size, "batches": args.batches,
            "step_ms": args.step_ms, "plan": args.plan, "ray_address": args.ray_address}
    with open(args.out, "w") as f:
        json.dump(as_json(results, meta), f, indent=2)
    if args.plot:
        plot_results(results, args.plot)
    lines = ["| mode | images/s | lane shares | waits for data | peak host RSS | peak GPU memory | what ran |",
             "| --- | ---: | --- | ---: | ---: | ---: | --- |"]
    for r in results:
        gpu = f"{r.peak_gpu_mb:.0f} MiB" if r.peak_gpu_mb is not None else "no GPU"
        shares = ", ".join(f"{k} {v:.0%}" for k, v in r.shares.items())
        lines.append(f"| {r.mode} | {r.images_per_s:.0f} | {shares} | {r.wait_fraction:.0%} | "
                     f"{r.peak_rss_mb:.0f} MiB | {gpu} | {r.label} |")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hybridload", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run the loader on a generated photo dataset and report images/s")
    d.add_argument("--data", default=os.environ.get("HYBRIDLOAD_DEMO_DATA", "data/demo-photos"),
                   help="where the generated photo dataset lives (made once, reused)")
    d.add_argument("--images", type=int, default=512, help="dataset size")
    d.add_argument("--classes", type=int, default=8)
    d.add_argument("--batch-size", type=int, default=64)
    d.add_argument("--size", type=int, default=224, help="output size of RandomResizedCrop")
    d.add_argument("--epochs", type=int, default=2)
    d.add_argument("--mode", default="auto", choices=["auto", "split", "gpu", "cpu"])
    d.add_argument("--in-process", action="store_true", help="the in-process lane (threads), --threads of them")
    d.add_argument("--ray", action="store_true",
                   help="the CPU lane on Ray actors (RAY_ADDRESS if set, else an embedded cluster on 127.0.0.1)")
    d.add_argument("--threads", type=int, default=None, help="in-process lane threads (default: all CPUs)")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    d.set_defaults(func=cmd_demo)

    pr = sub.add_parser("profile", help="measure GPU headroom and lane rates, pick the split, write a plan")
    pr.add_argument("data", help="an ImageFolder root (root/<class>/<image>)")
    pr.add_argument("--recipe", default="imagenet_train:224", help="imagenet_train[:SIZE] or imagenet_eval[:SIZE]")
    pr.add_argument("--batch-size", type=int, default=64)
    pr.add_argument("--ray-address", default=None, help="measure the nodes of this Ray cluster too")
    pr.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement")
    pr.add_argument("--sample", type=int, default=256, help="images sampled from the dataset")
    pr.add_argument("--demand", type=float, default=None, help="images/s the training consumes (default: unbounded)")
    pr.add_argument("--max-gpu-util", type=float, default=0.9)
    pr.add_argument("--reserve-local-cpus", type=int, default=0)
    pr.add_argument("--gpu-threads", type=int, default=2)
    pr.add_argument("--no-check", action="store_true", help="skip measuring the loader at a few shares")
    pr.add_argument("--out", default="plan.json")
    pr.add_argument("--plot", default=None, help="write a PNG of throughput against GPU share")
    pr.add_argument("--quiet", action="store_true")
    pr.set_defaults(func=cmd_profile)

    b = sub.add_parser("bench", help="single-GPU against multi-node against CPU-only throughput")
    b.add_argument("data", help="an ImageFolder root (root/<class>/<image>)")
    b.add_argument("--plan", default=None, help="a plan file from `hybridload profile`")
    b.add_argument("--modes", default="single-gpu,multi-node,cpu")
    b.add_argument("--batches", type=int, default=50)
    b.add_argument("--batch-size", type=int, default=64)
    b.add_argument("--step-ms", type=float, default=0.0, help="the consumer's time per training step")
    b.add_argument("--recipe", default="imagenet_train:224")
    b.add_argument("--ray-address", default=None, help="the cluster for multi-node (default: embedded)")
    b.add_argument("--threads", type=int, default=None, help="in-process lane threads")
    b.add_argument("--out", default="bench.json")
    b.add_argument("--plot", default=None)
    b.add_argument("--quiet", action="store_true")
    b.set_defaults(func=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
