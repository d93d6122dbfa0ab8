"""Helpers the benchmark scripts share: the photo set, /proc/stat "other load", timing and
per-contestant summaries (median over interleaved rounds), ratios, Ray on loopback.

Imported by the scripts in this folder (each puts the folder on ``sys.path`` first).
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import time
from pathlib import Path

from hybridload.datasets import make_photo_folder

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PHOTO_ROOT = REPO / "data" / "bench-photos"
OTHER_LOAD_WARN = 0.2  # cores used by other processes during a timed run

_CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_busy_s() -> float | None:
    """CPU seconds the whole machine has been busy (all processes, steal included), from
    /proc/stat; None where it cannot be read. Used to see other load during a timed run."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = v
    return (user + nice + system + irq + softirq + steal) / _CLK


def photo_set(root: Path, n: int, log: logging.Logger | None = None) -> Path:
    """The photo set of ``n`` JPEGs lives in ``root/n<n>`` (one folder per size, so sets of
    different sizes never mix; shared by every benchmark); generated on first use, reused
    afterwards."""
    folder = root / f"n{n}"
    t0 = time.perf_counter()
    make_photo_folder(folder, n)
    (log or logging.getLogger("benchmarks")).info("photo set: %s (%d images; ready in %.1f s)", folder, n,
                                                  time.perf_counter() - t0)
    return folder


def photo_source(root: Path, n: int, log: logging.Logger | None = None):
    """(folder, ImageFolder source) of the photo set of ``n`` JPEGs; refuses a folder that holds
    another number of images (a stale set: delete it to regenerate)."""
    from hybridload import sources
    folder = photo_set(root, n, log)
    source = sources.ImageFolder(folder)
    if len(source) != n:
        raise SystemExit(f"{folder} holds {len(source)} images, expected {n}; delete it to regenerate")
    return folder, source


def usable_cpus() -> int:
    from hybridload.policy import usable_cpus as cpus
    return cpus()


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        stream=sys.stderr)


# --------------------------------------------------------------------------- timing

def tree_cpu_s(root: int | None = None) -> float | None:
    """CPU seconds used so far by this process and every live descendant (Ray's raylet and
    workers it started, DataLoader workers, ...), from /proc; None where /proc is missing."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2:].split()  # fields from 3 (state) on
        pid, ppid = int(e), int(rest[1])
        times[pid] = (int(rest[11]) + int(rest[12])) / _CLK  # utime + stime
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def timed(fn, *a) -> dict:
    """Run ``fn(*a)`` (it returns the number of images it produced) and time it.

    ``cpu_s``: this process's CPU time; ``tree_cpu_s``: this process and its descendants
    (Ray workers started by this process, DataLoader workers); ``other_load``: cores every
    other process on the machine used meanwhile (/proc/stat less ``tree_cpu_s``)."""
    m0, k0, c0, t0 = machine_busy_s(), tree_cpu_s(), time.process_time(), time.perf_counter()
    images = fn(*a)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    m1, k1 = machine_busy_s(), tree_cpu_s()
    tree = cpu if k0 is None or k1 is None else max(cpu, k1 - k0)
    other = None if m0 is None or m1 is None else max(0.0, (m1 - m0 - tree) / wall)
    return {"images": images, "wall_s": wall, "cpu_s": cpu, "tree_cpu_s": tree, "images_per_s": images / wall,
            "cpu_util": cpu / wall, "tree_cpu_util": tree / wall, "other_load": other}


def contended(other_load: float | None, threads: int) -> bool:
    """Other processes wanted more than the cores this contestant leaves free."""
    free = max(0, usable_cpus() - threads)
    return other_load is not None and other_load > free + OTHER_LOAD_WARN


def summarize(rounds: list[dict], threads: int) -> dict:
    rates = [r["images_per_s"] for r in rounds]
    utils = [r["cpu_util"] for r in rounds]
    per_cpu = [r["images"] / r["cpu_s"] for r in rounds if r["cpu_s"] > 0]
    other = [r["other_load"] for r in rounds if r.get("other_load") is not None]
    return {"median_images_per_s": statistics.median(rates), "min_images_per_s": min(rates),
            "max_images_per_s": max(rates), "median_cpu_util": statistics.median(utils),
            "median_images_per_cpu_s": statistics.median(per_cpu) if per_cpu else None,
            "median_other_load": statistics.median(other) if other else None,
            "median_tree_cpu_util": statistics.median(r.get("tree_cpu_util", r["cpu_util"]) for r in rounds),
            "contended_rounds": sum(contended(o, threads) for o in other),
            "rounds": rounds}


def ratio(results: dict, a: str, b: str, field: str = "images_per_s") -> dict | None:
    """a/b: ratio of the medians, and the median of the per-round (paired) ratios."""
    if a not in results or b not in results:
        return None
    ra, rb = results[a]["rounds"], results[b]["rounds"]
    if field == "images_per_cpu_s":
        va = [r["images"] / r["cpu_s"] for r in ra]
        vb = [r["images"] / r["cpu_s"] for r in rb]
    else:
        va = [r[field] for r in ra]
        vb = [r[field] for r in rb]
    paired = [x / y for x, y in zip(va, vb)]
    return {"of_medians": statistics.median(va) / statistics.median(vb),
            "paired_median": statistics.median(paired), "paired_min": min(paired),
            "paired_max": max(paired)}


def fmt(x, spec=".0f"):
    return "n/a" if x is None else format(x, spec)


def rotate(items: list, k: int) -> list:
    """``items`` starting at position ``k`` (mod len): who goes first rotates per round."""
    k %= max(1, len(items))
    return items[k:] + items[:k]


# --------------------------------------------------------------------------- Ray

def ray_loopback_env() -> None:
    """Environment Ray must see before it starts: everything on 127.0.0.1, no usage stats."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"


def check_ray_loopback(ray) -> list[str]:
    """The addresses of the connected cluster's nodes; raises unless all are loopback."""
    addrs = sorted({n.get("NodeManagerAddress", "?") for n in ray.nodes() if n.get("Alive")})
    bad = [a for a in addrs if not a.startswith("127.")]
    if bad:
        raise RuntimeError(f"Ray is not confined to loopback: node addresses {addrs}")
    return addrs
