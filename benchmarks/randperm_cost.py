"""What ``order="randperm"`` costs a rank at the start of an epoch, at a given dataset size.

``python benchmarks/randperm_cost.py 1e8``: builds a ``DistributedBatchSampler`` over N samples
(rank 0 of 8, batches of 256) and times its first batch of epoch 0 — the whole epoch's order is made
there (``torch.randperm(N)`` and this rank's share of it) — with the process's CPU time and peak RSS.
Run one size per process, so one size's memory does not hide in another's. Figures:
benchmarks/RESULTS.md (docs section).
"""

import argparse
import resource
import time

from hybridload.sampling.sampler import DistributedBatchSampler


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n", nargs="?", type=float, default=1e8, help="dataset size (1e8 or 100000000)")
    n = int(ap.parse_args(argv).n)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sampler = DistributedBatchSampler(n, 256, seed=0, shuffle=True, rank=0, world_size=8)
    sampler.set_epoch(0)
    wall, cpu = time.perf_counter(), time.process_time()
    next(iter(sampler))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"n={n:.0e}, rank 0 of 8, batch 256: first batch after {wall:.1f} s ({cpu:.1f} s of CPU), "
        f"peak RSS {peak / 2**20:.2f} GiB ({(peak - base) / 2**20:.2f} GiB above the imports)"
    )


if __name__ == "__main__":
    main()
