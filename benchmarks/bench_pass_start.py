#!/usr/bin/env python
"""What each pass of the drop-in DataLoader on Ray actors costs to start, with
``persistent_workers=False`` (torch's default: each pass starts its own actors, a Ray worker
process each, importing torch and the dataset's code) against ``True`` (the actors stay until
``close()``): seconds per pass over a tiny in-memory dataset, so the time is the pass's start
and end, not its work. Each round runs both loaders, alternating which goes first, on one
embedded Ray cluster; the first pass of each loader (its actors' first start) is reported apart.

    python benchmarks/bench_pass_start.py --rounds 3 --passes 4 --workers 2
"""

from __future__ import annotations

import logging
import statistics
import sys
import time

import _harness as h
from _data import parser

log = logging.getLogger("bench_pass_start")


def passes(persistent: bool, n: int, workers: int) -> list[float]:
    """Seconds of each of ``n`` passes of one loader (32 samples, batches of 4)."""
    import torch
    from torch.utils.data import TensorDataset

    import hybridload

    ds = TensorDataset(torch.arange(32))
    with hybridload.DataLoader(
        ds, batch_size=4, num_workers=workers, distribute_mode=True, persistent_workers=persistent
    ) as loader:
        took = []
        for _ in range(n):
            t0 = time.perf_counter()
            batches = sum(1 for _ in loader)
            took.append(time.perf_counter() - t0)
            if batches != 8:
                raise RuntimeError(f"a pass gave {batches} batches, not 8")
    return took


def main(argv=None) -> int:
    ap = parser(__doc__, quick=dict(rounds=1, passes=2), photos=False, workers=2)
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each running both loaders")
    ap.add_argument("--passes", type=int, default=4, help="passes of each loader per round")
    args = ap.parse_args(argv)
    env = h.environment()
    got: dict[bool, dict[str, list[float]]] = {p: {"first": [], "later": []} for p in (False, True)}
    for r in range(args.rounds):
        for persistent in (False, True) if r % 2 == 0 else (True, False):
            took = passes(persistent, args.passes, args.workers)
            got[persistent]["first"].append(took[0])
            got[persistent]["later"] += took[1:]
            log.info("round %d, persistent_workers=%s: %s", r, persistent, " ".join(f"{t:.2f}" for t in took))
    rows = [
        [
            f"persistent_workers={p}",
            f"{statistics.median(got[p]['first']):.2f}",
            f"{statistics.median(got[p]['later']):.2f}" if got[p]["later"] else "n/a",
            f"{min(got[p]['later']):.2f}-{max(got[p]['later']):.2f}" if got[p]["later"] else "n/a",
        ]
        for p in (False, True)
    ]
    lines = [
        f"## bench_pass_start: the drop-in on {args.workers} Ray actors, {args.rounds} rounds x "
        f"{args.passes} passes, 32 in-memory samples a pass",
        "",
        h.environment_line(env),
        "",
        *h.markdown_table(["loader", "first pass s (median)", "later passes s (median)", "later min-max"], rows),
        "",
    ]
    h.emit(lines, args, {"benchmark": "bench_pass_start", "rows": rows}, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
