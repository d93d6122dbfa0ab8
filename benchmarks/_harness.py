"""The benchmark method, written once: contestants timed in interleaved rounds, paired ratios,
contention detection, a markdown report and a JSON record.

Every round runs each contestant once over the same work (who goes first rotates), after
untimed warm-up rounds. Per contestant: median, min and max images/s over the rounds; per pair:
the ratio of the medians and the median (min, max) of the per-round ratios. Only such ratios
are meaningful on a shared machine. ``other_load`` is the cores every other process used
during a run (/proc/stat less this process tree); a round is *contended* when it exceeds the
cores the contestant leaves free by ``OTHER_LOAD_WARN``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from hybridload.cli._tables import format_table
from hybridload._policy import usable_cpus

LOG = logging.getLogger("benchmarks")
OTHER_LOAD_WARN = 0.2  # cores used by other processes during a timed run
_CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
CONTENTION_NOTE = (
    "CPU util: CPU seconds / wall seconds of this process (with children: and its descendants, "
    "e.g. Ray workers, DataLoader workers). Other load: cores used by every other process meanwhile "
    "(/proc/stat, steal included); a round is contended when that exceeds the cores the contestant "
    f"leaves free by {OTHER_LOAD_WARN}."
)


# --------------------------------------------------------------------------- measuring


def machine_busy_s() -> float | None:
    """CPU seconds the whole machine has been busy (steal included), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = v
    return (user + nice + system + irq + softirq + steal) / _CLK


def tree_cpu_s() -> float | None:
    """CPU seconds used so far by this process and its descendants (live, or reaped by one of them), from /proc."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return None
    for e in entries:
        try:
            with open(f"/proc/{e}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2 :].split()  # fields from 3 (state) on
        times[int(e)] = sum(int(x) for x in rest[11:15]) / _CLK  # utime, stime, cutime, cstime
        children.setdefault(int(rest[1]), []).append(int(e))
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def timed(fn: Callable, *a) -> dict:
    """Run ``fn(*a)`` and time it. It returns the images it processed, or a dict with ``images``
    and extra fields, which are kept in the record."""
    m0, k0, c0, t0 = machine_busy_s(), tree_cpu_s(), time.process_time(), time.perf_counter()
    out = fn(*a)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    m1, k1 = machine_busy_s(), tree_cpu_s()
    extra = dict(out) if isinstance(out, dict) else {"images": out}
    images = extra.pop("images")
    tree = cpu if k0 is None or k1 is None else max(cpu, k1 - k0)
    other = None if m0 is None or m1 is None else max(0.0, (m1 - m0 - tree) / wall)
    return {
        "images": images,
        "wall_s": wall,
        "cpu_s": cpu,
        "tree_cpu_s": tree,
        "images_per_s": images / wall,
        "cpu_util": cpu / wall,
        "tree_cpu_util": tree / wall,
        "other_load": other,
        **extra,
    }


# --------------------------------------------------------------------------- contestants and rounds


class Contestant:
    """One thing to time: ``run(epoch)`` (a method, or given: ``Contestant(name, run)``) does one round's
    work and returns the images it processed, or a dict with ``images`` and extra fields kept with the
    round. ``setup`` (once), ``prepare`` (before each run) and ``finish`` (after each run; may return more
    fields) are untimed; ``close`` releases everything. ``threads``: the cores it means to use, for
    contention. ``pads``: it may deliver more images than asked (a padded last batch)."""

    name = ""
    threads = 1
    pads = False

    def __init__(self, name: str = "", run: Callable[[int], int | dict] | None = None):
        self.name = name
        if run is not None:
            self.run = run

    def setup(self) -> None:
        pass

    def prepare(self) -> None:
        pass

    def run(self, epoch: int) -> int | dict:
        raise NotImplementedError

    def finish(self) -> dict | None:
        return None

    def close(self) -> None:
        pass


def warmup_epoch(rnd: int) -> int:
    """The epoch a round runs: the round number, or one far from them for warm-up rounds."""
    return rnd if rnd >= 0 else 20_000 + rnd


def time_run(c: Contestant, epoch: int) -> dict:
    c.prepare()
    try:
        r = timed(c.run, epoch)
    finally:
        extra = c.finish()
    return {**r, **(extra or {})}


def warm_up(contestants: Sequence[Contestant], epoch: int = 10_000, log: logging.Logger | None = None) -> None:
    """Set each contestant up and run it once, untimed (starts workers, fills caches)."""
    for c in contestants:
        t0 = time.perf_counter()
        c.setup()
        time_run(c, epoch)
        (log or LOG).info("%s: set up and warmed up in %.1f s", c.name, time.perf_counter() - t0)


def run_rounds(
    contestants: Sequence[Contestant],
    rounds: int,
    warmup_rounds: int = 1,
    *,
    epoch: Callable[[int], int] = warmup_epoch,
    expect: int | None = None,
    log: logging.Logger | None = None,
    label: str = "",
) -> dict[str, list[dict]]:
    """Interleaved rounds: {name: [round record, ...]}; warm-up rounds are run and discarded.
    ``expect``: the images a run must deliver (a contestant that ``pads`` may deliver more)."""
    log = log or LOG
    per_round: dict[str, list[dict]] = {c.name: [] for c in contestants}
    for rnd in range(-warmup_rounds, rounds):
        k = rnd % len(contestants)  # who goes first rotates
        for c in [*contestants[k:], *contestants[:k]]:
            r = time_run(c, epoch(rnd))
            if rnd < 0:
                log.info("%swarm-up   %-24s %7.0f img/s (discarded)", label, c.name, r["images_per_s"])
                continue
            if expect is not None and r["images"] != expect and not (c.pads and r["images"] > expect):
                raise RuntimeError(f"{c.name} delivered {r['images']} images, expected {expect}")
            per_round[c.name].append(r)
            log.info(
                "%sround %d/%d  %-24s %7.0f img/s  (CPU util %.2f, with children %.2f; other load %s)",
                label,
                rnd + 1,
                rounds,
                c.name,
                r["images_per_s"],
                r["cpu_util"],
                r["tree_cpu_util"],
                fmt(r["other_load"], ".2f"),
            )
    return per_round


def first_batch_s(loader) -> float:
    """Seconds from ``iter(loader)`` (which starts its workers) to its first batch; the loader closed after."""
    try:
        t0 = time.perf_counter()
        next(iter(loader))
        return time.perf_counter() - t0
    finally:
        loader.close()


def per_item(name: str, fn: Callable, items: Sequence) -> Contestant:
    """A contestant that calls ``fn(item)`` for every item, one thread."""

    def run(epoch: int) -> int:
        for x in items:
            fn(x)
        return len(items)

    return Contestant(name, run)


def dali_version(skip: bool, log: logging.Logger | None = None) -> str | None:
    """DALI's version, or None when it is skipped (``--no-dali``) or not importable (logged)."""
    try:
        import nvidia.dali as dali
    except ImportError as exc:
        (log or LOG).warning("DALI is not importable (%s); skipping the DALI contestants", exc)
        return None
    return None if skip else dali.__version__


def set_up_and_run(
    contestants: Sequence[Contestant], rounds: int, warmup_rounds: int, log: logging.Logger | None = None, **kw
) -> dict[str, dict]:
    """Set every contestant up, run the interleaved rounds, close them all: the summaries."""
    try:
        for c in contestants:
            c.setup()
        per_round = run_rounds(contestants, rounds, warmup_rounds, log=log, **kw)
    finally:
        close_all(contestants, log)
    return summarize_all(per_round, contestants)


def close_all(contestants: Sequence, log: logging.Logger | None = None) -> None:
    """Close every contestant, logging (not raising) a failure so the rest still close."""
    for c in contestants:
        try:
            c.close()
        except Exception as exc:  # keep closing the rest
            (log or LOG).warning("closing %s failed: %s", c.name, exc)


# --------------------------------------------------------------------------- summary


def contended(other_load: float | None, threads: int) -> bool:
    """Other processes wanted more than the cores this contestant leaves free."""
    return other_load is not None and other_load > max(0, usable_cpus() - threads) + OTHER_LOAD_WARN


def summarize(rounds: list[dict], threads: int) -> dict:
    rates = [r["images_per_s"] for r in rounds]
    per_cpu = [r["images"] / r["cpu_s"] for r in rounds if r["cpu_s"] > 0]
    other = [r["other_load"] for r in rounds if r.get("other_load") is not None]
    return {
        "threads": threads,
        "median_images_per_s": statistics.median(rates),
        "min_images_per_s": min(rates),
        "max_images_per_s": max(rates),
        "median_cpu_util": statistics.median(r["cpu_util"] for r in rounds),
        "median_tree_cpu_util": statistics.median(r["tree_cpu_util"] for r in rounds),
        "median_images_per_cpu_s": statistics.median(per_cpu) if per_cpu else None,
        "median_other_load": statistics.median(other) if other else None,
        "contended_rounds": sum(contended(o, threads) for o in other),
        "rounds": rounds,
    }


def summarize_all(per_round: dict[str, list[dict]], contestants: Sequence[Contestant]) -> dict[str, dict]:
    threads = {c.name: c.threads for c in contestants}
    return {k: summarize(v, threads.get(k, 1)) for k, v in per_round.items() if v}


def ratio(results: dict, a: str, b: str, field: str = "images_per_s") -> dict | None:
    """a / b: the ratio of the medians, and the median, min and max of the per-round ratios."""
    if a not in results or b not in results:
        return None
    va, vb = (
        [r["images"] / r["cpu_s"] if field == "images_per_cpu_s" else r[field] for r in results[k]["rounds"]]
        for k in (a, b)
    )
    paired = [x / y for x, y in zip(va, vb)]
    return {
        "of_medians": statistics.median(va) / statistics.median(vb),
        "paired_median": statistics.median(paired),
        "paired_min": min(paired),
        "paired_max": max(paired),
        "paired": paired,
    }


def goals_met(ratios: dict[str, dict | None], goals: dict[str, float]) -> dict[str, dict | None]:
    """Per goal (ratio name -> minimum, on the ratio of the medians): min, value, met; None if not run."""
    return {
        k: None
        if ratios.get(k) is None
        else {"min": g, "value": ratios[k]["of_medians"], "met": ratios[k]["of_medians"] >= g}
        for k, g in goals.items()
    }


# --------------------------------------------------------------------------- report


def fmt(x, spec: str = ".0f") -> str:
    return "n/a" if x is None else format(x, spec)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence]) -> list[str]:
    """Lines of a markdown table (the command line's own tables); the first column left-aligned,
    the others right-aligned."""
    return format_table(header, [[str(x) for x in row] for row in rows], right=range(1, len(header))).splitlines()


COLUMNS: dict[str, tuple[str, Callable[[dict], object]]] = {
    "threads": ("threads", lambda r: r["threads"]),
    "median": ("median img/s", lambda r: f"{r['median_images_per_s']:.0f}"),
    "min": ("min", lambda r: f"{r['min_images_per_s']:.0f}"),
    "max": ("max", lambda r: f"{r['max_images_per_s']:.0f}"),
    "cpu": (
        "CPU util (process / with children)",
        lambda r: f"{r['median_cpu_util']:.2f} / {r['median_tree_cpu_util']:.2f}",
    ),
    "per_cpu": ("img per CPU-s", lambda r: fmt(r["median_images_per_cpu_s"])),
    "other": ("other load", lambda r: fmt(r["median_other_load"], ".2f")),
    "contended": ("contended rounds", lambda r: f"{r['contended_rounds']}/{len(r['rounds'])}"),
}
STANDARD = ("threads", "median", "min", "max", "cpu", "per_cpu", "other", "contended")


def results_table(
    results: dict[str, dict],
    columns: Sequence[str | tuple] = STANDARD,
    first: str = "contestant",
    skipped: dict[str, str] | None = None,
) -> list[str]:
    """One row per contestant; columns named from ``COLUMNS`` or given as (title, fn of summary)."""
    cols = [COLUMNS[c] if isinstance(c, str) else c for c in columns]
    rows = [[name, *(fn(r) for _t, fn in cols)] for name, r in results.items()]
    rows += [[name, f"skipped: {why}", *[""] * (len(cols) - 1)] for name, why in (skipped or {}).items()]
    return markdown_table([first, *(t for t, _fn in cols)], rows)


def ratio_table(ratios: dict[str, dict | None], goals: dict[str, float] | None = None) -> list[str]:
    """Ratio of medians and per-round ratios; with ``goals``, a goal and a met column."""
    goals = goals or {}
    rows = []
    for k, r in ratios.items():
        g = goals.get(k)
        cells = (
            ["n/a", "n/a"]
            if r is None
            else [f"{r['of_medians']:.2f}x", f"{r['paired_median']:.2f}x ({r['paired_min']:.2f}-{r['paired_max']:.2f})"]
        )
        met = "" if g is None else "n/a" if r is None else ("yes" if r["of_medians"] >= g else "**NO**")
        rows.append([k, *cells, *([f">= {g}" if g else "", met] if goals else [])])
    return markdown_table(
        ["ratio", "of medians", "per round: median (min-max)", *(["goal", "met"] if goals else [])], rows
    )


def environment(**extra) -> dict:
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpus": usable_cpus(),
        "loadavg_start": os.getloadavg(),
        **extra,
    }


def environment_line(env: dict) -> str:
    env.setdefault("loadavg_end", os.getloadavg())
    extra = "".join(f", {k} {env[k]}" for k in ("dali", "ray") if env.get(k))
    return (
        f"Python {env['python']}, torch {env['torch']} ({env['torch_threads']} intra-op thread(s)){extra}; "
        f"{env['cpus']} CPUs usable; load average {env['loadavg_start'][0]:.2f} at start, "
        f"{env['loadavg_end'][0]:.2f} at end.\n"
    )


def emit(lines: Sequence[str], args: argparse.Namespace, doc: dict, log: logging.Logger | None = None) -> None:
    """Print the markdown report; write ``doc`` (with the run's configuration) to ``args.out``."""
    print("\n".join(lines), flush=True)
    if getattr(args, "out", None):
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        write_json(args.out, {"benchmark": doc.pop("benchmark", ""), "config": config, **doc})
        (log or LOG).info("wrote %s", args.out)


def write_json(path: Path | str, doc: dict | list) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=2, default=str) + "\n")


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
