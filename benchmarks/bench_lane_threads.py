"""The in-process lane's threads against the trainer's intra-op thread pool, side by side.

    python benchmarks/bench_lane_threads.py --root data/bench-photos --rounds 3 --seconds 4

Two ways for the lane's threads to run torch: "own" (one intra-op thread each,
``lanes/local/inprocess.one_intraop_thread``) or "shared" (the process's intra-op threads, with
the trainer's: the lane before issue 35.7). The lane now takes "own" for one thread and "shared"
for more. Contestants run interleaved in one process, once per round, so a burst of other load
hits all of them; reported: median images/s of HybridLoader(local_workers="threads") at 1 and 2
lane threads each way, and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.lanes.local import inprocess

POOL = inprocess.DaemonPool


def rate(root: str, threads: int, own_pool: bool, seconds: float, batch: int) -> float:
    inprocess.DaemonPool = lambda n, name, own_intraop=False: POOL(n, name, own_intraop=own_pool)
    policy = LoaderPolicy(local_workers="threads", threads=threads, cpu_actors=0)
    with HybridLoader(sources.ImageFolder(root), recipe.imagenet_train(224), batch, device="cpu", policy=policy) as ld:
        it = iter(ld)
        next(it)  # start-up
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            try:
                n += len(next(it)[0])
            except StopIteration:
                it = iter(ld)
        return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, help="an ImageFolder of photo JPEGs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    names = [(t, own) for t in (1, 2) for own in (False, True)]
    got: dict = {k: [] for k in names}
    for _ in range(args.rounds):
        for t, own in names:
            got[(t, own)].append(rate(args.root, t, own, args.seconds, args.batch_size))
    med = {k: statistics.median(v) for k, v in got.items()}
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads in the trainer; "
        f"{args.rounds} rounds of {args.seconds:g} s, batch {args.batch_size}, imagenet_train(224)\n"
    )
    print("| lane threads | torch ops on | median images/s | rounds |\n| ---: | --- | ---: | --- |")
    for (t, own), m in med.items():
        print(
            f"| {t} | {'one intra-op thread each' if own else 'the shared intra-op threads'} | "
            f"{m:.0f} | {' / '.join(f'{r:.0f}' for r in got[(t, own)])} |"
        )
    print(
        f"\n- one lane thread / two, both shared (the lane before): {med[(1, False)] / med[(2, False)]:.2f}x; "
        f"one own / two shared (the lane now): {med[(1, True)] / med[(2, False)]:.2f}x"
    )
    print(
        f"- own / shared: 1 lane thread {med[(1, True)] / med[(1, False)]:.2f}x, "
        f"2 lane threads {med[(2, True)] / med[(2, False)]:.2f}x"
    )


if __name__ == "__main__":
    main()
