"""The soak's verdict: the uninterrupted reference run, the comparison of what the job trained on
with it, and what was left behind."""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict

from _soak_trainer import BATCH, SIZE, entries
from _soak_world import start_time

#: largest difference of a GPU-engine thumbnail value from the kernels' (8x8 means of uint8 pixels)
THUMB_TOLERANCE = 12


def reference(paths: list[str], labels: list[int], *, seed: int, epochs: int, segments: list[list]) -> list[list]:
    """What an uninterrupted job delivers with the same world sizes from the same steps on
    (``segments``: [first step, world size, epoch] as the job's checkpoint records them): each
    world's ranks in step in this process (threads), rank 0's state handed to the next world."""
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources

    src = sources.FileList(paths, labels)
    rows, state, step, epoch = [], None, 0, 0
    for k, (_first, world, _epoch) in enumerate(segments):
        end = segments[k + 1][0] if k + 1 < len(segments) else None
        loaders = [
            HybridLoader(
                src,
                recipe.imagenet_train(SIZE),
                BATCH,
                seed=seed,
                rank=r,
                world_size=world,
                policy=LoaderPolicy(cpu_actors=0, threads=1),
                return_indices=True,
                device="cpu",
            )
            for r in range(world)
        ]
        try:
            if state is not None:
                for ld in loaders:
                    ld.load_state_dict(state)
            stopped = False
            while epoch < epochs and not stopped:
                for ld in loaders:
                    ld.set_epoch(epoch)
                for batches in zip(*loaders):
                    for r, (images, labs, idx) in enumerate(batches):
                        rows.extend(entries(epoch, k, world, r, images, labs, idx))
                    step += 1
                    if step == end:
                        stopped = True
                        break
                if not stopped:
                    epoch += 1
            if end is not None:
                state, epoch = loaders[0].state_dict(), segments[k + 1][2]
        finally:
            for ld in loaders:
                ld.close()
    return rows


def compare(got: list[list], want: list[list], *, num_samples: int) -> list[str]:
    """What differs between the job's rows and the reference's (empty: every invariant held).

    Rows are [epoch, segment, world, rank, index, label, md5, thumbnail(, gpu)]: per (epoch,
    segment, rank) the same indices in the same order with the same labels and pixels (bit
    for bit; within ``THUMB_TOLERANCE`` for a row the GPU engine may have made), and each
    epoch every sample at least once, the extras no more than the reference's padding."""
    problems: list[str] = []

    def seqs(rows):
        out = defaultdict(list)
        for r in rows:
            out[tuple(r[:4])].append(r)
        return out

    a, b = seqs(got), seqs(want)
    for key in sorted(set(a) | set(b)):
        ga, wb = a.get(key, []), b.get(key, [])
        where = "epoch %d segment %d (world %d) rank %d" % key
        if [r[4] for r in ga] != [r[4] for r in wb]:
            lost = Counter(r[4] for r in wb) - Counter(r[4] for r in ga)
            extra = Counter(r[4] for r in ga) - Counter(r[4] for r in wb)
            problems.append(
                f"{where}: indices differ from the reference (lost {sorted(lost.elements())}, "
                f"extra {sorted(extra.elements())}, {len(ga)} vs {len(wb)} delivered)"
            )
            continue
        for x, y in zip(ga, wb):
            if x[5] != y[5]:
                problems.append(f"{where}: sample {x[4]} has label {x[5]}, the reference {y[5]}")
            elif x[6] != y[6] and not (len(x) > 8 and x[8] and _close(x[7], y[7])):
                problems.append(f"{where}: sample {x[4]}'s pixels differ from the reference's")
    for epoch in sorted({r[0] for r in got} | {r[0] for r in want}):
        have = Counter(r[4] for r in got if r[0] == epoch)
        padding = sum(Counter(r[4] for r in want if r[0] == epoch).values()) - num_samples
        missing = [i for i in range(num_samples) if not have[i]]
        extras = sum(have.values()) - num_samples + len(missing)
        if missing:
            problems.append(f"epoch {epoch}: samples never delivered: {missing}")
        if extras > padding:
            problems.append(f"epoch {epoch}: {extras} samples delivered twice, the padding is {padding}")
    return problems


def _close(x: list[int], y: list[int]) -> bool:
    return len(x) == len(y) and max(abs(p - q) for p, q in zip(x, y)) <= THUMB_TOLERANCE


def leftovers(seen: dict[int, int | None], shm: set[str], *, grace_s: float = 20.0) -> list[str]:
    """Processes seen during the soak still alive (same pid, same start time) and shared-memory
    segments its trainers mapped still in /dev/shm, after ``grace_s`` for them to go."""
    deadline = time.monotonic() + grace_s
    while True:
        procs = [pid for pid, t in seen.items() if t is not None and start_time(pid) == t]
        segs = sorted(s for s in shm if os.path.exists(s))
        if (not procs and not segs) or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    return [f"process {pid} still alive: {_cmd(pid)}" for pid in procs] + [
        f"shared memory {s} still in /dev/shm" for s in segs
    ]


def _cmd(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return "?"


def rss_growth(statuses: list[list[list[float]]]) -> int:
    """The largest RSS growth (KiB) of a trainer life from its first epoch's end to its last."""
    return max([int(s[-1][1] - s[0][1]) for s in statuses if len(s) >= 2] or [0])


def calm_since(events: list[dict]) -> float:
    """When the last fault was over (time.time()): its injection plus its recovery, or plus its
    Ray pool's return to its target where that took longer; 0 without faults."""
    ends = [e["at"] + max(e["recovery_s"], e.get("pool_recovery_s") or 0) for e in events]
    return max(ends, default=0.0)


def fd_growth(statuses: list[list[list[float]]], calm: float) -> int:
    """The largest growth of a trainer life's open file descriptors between its epoch ends after
    ``calm`` (`calm_since`); lives with fewer than two such ends are not read. A leak grows on
    with the epochs; a fault's churn (a Ray node added, an actor replaced on another node) may
    leave a trainer a connection or two more, and stops there (+1 to +3 over a node removed,
    two added and actors killed, then flat for 8 epochs: the Ray CI soak's seed 14)."""
    growth = [int(s[-1][0] - s[0][0]) for s in ([x for x in life if x[2] >= calm] for life in statuses) if len(s) >= 2]
    return max(growth or [0])
