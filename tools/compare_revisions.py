#!/usr/bin/env python
"""Two git revisions side by side: the loader-overhead and kernels benchmarks run for each, in
alternation, in one run; per contestant the head / base ratio of images/s.

Each revision is exported with ``git archive`` into a temporary folder (the repository, its
worktrees and its stash are left alone) and runs its own benchmark scripts on its own package:
``PYTHONPATH`` puts the folder first (a revision whose ``pyproject.toml`` still maps top-level
folders in through ``package-dir`` gets them linked in place), so the editable install of this
checkout serves nothing; a probe checks where ``hybridload`` and its CPU engine
(``hybridload._kernels``; ``hybridload.kernels`` in a revision before the internal modules took
their ``_``) load from before anything is timed. Both revisions share one photo set (``--root``) and this venv.

Repeat r runs base then head (head then base on odd repeats) for every benchmark, so the two
sides of a pair ran minutes apart at most. Reported per contestant present on both sides, for
images/s and images per CPU-second (steadier on a loaded machine): the median over repeats of
each run's median, head / base of those medians, and the per-repeat paired ratios (median,
min-max); and each benchmark's own ratios (loader / raw) for both sides. Only ratios mean
anything on a shared machine; the third-party rows of bench_kernels (pillow, simplejpeg)
change with no revision and show the noise.

    python tools/compare_revisions.py --base main~5 --head main
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the harness and the photo set

import _harness as h

log = logging.getLogger("compare_revisions")
REPO = Path(__file__).resolve().parents[1]
#: name: (script, default arguments): sizes that take a minute or two per run on 2 busy cores
BENCHES = {
    "loader_overhead": ("bench_loader_overhead.py", "--n 256 --rounds 3 --warmup-rounds 1"),
    "kernels": ("bench_kernels.py", "--n 128 --rounds 3 --warmup-rounds 1 --no-dali --no-photometric"),
}
QUICK_ARGS = "--quick"
GOAL = 0.97
#: per contestant, what is compared: images/s, and images per CPU-second of the benchmark's
#: process, which moves less when other processes take the cores (a loaded machine halves the
#: first and leaves the second nearly alone)
KINDS = {"images/s": "median_images_per_s", "images/CPU-s": "median_images_per_cpu_s"}
#: where the import system finds the package and a package-dir sub-package, without running
#: them (importing hybridload imports torch: seconds on a busy machine)
PROBE = """
import pathlib, sys
def find(name, path=None):
    for finder in sys.meta_path:
        spec = finder.find_spec(name, path) if hasattr(finder, "find_spec") else None
        if spec is not None:
            return spec
top = find("hybridload")
# hybridload.kernels in a revision from before the internal modules took their _
engine = "_kernels" if (pathlib.Path(top.origin).parent / "_kernels").is_dir() else "kernels"
sub = find("hybridload." + engine, top.submodule_search_locations)
print(pathlib.Path(top.origin).parent, pathlib.Path(sub.origin).parent)
"""


# --------------------------------------------------------------------------- pure


def paired(base: list[float | None], head: list[float | None]) -> list[float]:
    """Pure: head / base for each repeat where both sides measured a positive rate."""
    return [hv / bv for bv, hv in zip(base, head) if bv and hv]


def compare(base_docs: list[dict], head_docs: list[dict], goal: float = GOAL) -> list[dict]:
    """Pure: one benchmark's JSON documents (one per repeat, same order on both sides) into rows:
    per contestant on both sides, then per ratio the benchmark reports on both sides."""
    rows = []

    def medians(docs, name, key):
        return [d["contestants"].get(name, {}).get(key) for d in docs]

    names = [n for n in base_docs[0]["contestants"] if all(n in d["contestants"] for d in base_docs + head_docs)]
    for name in names:
        for kind, key in KINDS.items():
            b, hd = medians(base_docs, name, key), medians(head_docs, name, key)
            if not any(b) or not any(hd):
                continue
            bm, hm = statistics.median(v for v in b if v), statistics.median(v for v in hd if v)
            rows.append(
                {
                    "row": name,
                    "kind": kind,
                    "base": bm,
                    "head": hm,
                    "head_over_base": hm / bm,
                    "paired": paired(b, hd),
                    "met": hm / bm >= goal,
                }
            )
    ratio_names = [
        k for k in base_docs[0].get("ratios", {}) if all((d.get("ratios") or {}).get(k) for d in base_docs + head_docs)
    ]
    for k in ratio_names:
        b = [d["ratios"][k]["of_medians"] for d in base_docs]
        hd = [d["ratios"][k]["of_medians"] for d in head_docs]
        bm, hm = statistics.median(b), statistics.median(hd)
        rows.append(
            {
                "row": k,
                "kind": "ratio",
                "base": bm,
                "head": hm,
                "head_over_base": hm / bm,
                "paired": paired(b, hd),
                "met": hm / bm >= goal,
            }
        )
    return rows


def table(rows: list[dict], goal: float = GOAL) -> list[str]:
    """Pure: the markdown table of ``compare``'s rows."""
    cells = []
    for r in rows:
        pr = r["paired"]
        per = f"{statistics.median(pr):.3f}x ({min(pr):.3f}-{max(pr):.3f})" if pr else "n/a"
        fmt = "{:.3f}x" if r["kind"] == "ratio" else "{:.1f}"
        cells.append(
            [
                r["row"],
                r["kind"],
                fmt.format(r["base"]),
                fmt.format(r["head"]),
                f"{r['head_over_base']:.3f}x",
                per,
                "yes" if r["met"] else "**NO**",
            ]
        )
    return h.markdown_table(
        ["row", "of", "base", "head", "head / base", "per repeat: median (min-max)", f">= {goal}"], cells
    )


def order(repeat: int) -> tuple[str, str]:
    """Pure: which side runs first in a repeat (alternating, so neither always runs on a warmer machine)."""
    return ("base", "head") if repeat % 2 == 0 else ("head", "base")


# --------------------------------------------------------------------------- trees and runs


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True, timeout=120).stdout


def export(rev: str, dest: Path) -> str:
    """``rev``'s files into ``dest`` (git archive), its package-dir entries linked into the
    package; returns the full commit id."""
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}").strip()
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, capture_output=True, check=True, timeout=300)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True, timeout=300)
    conf = tomllib.loads((dest / "pyproject.toml").read_text())
    for package, folder in conf.get("tool", {}).get("setuptools", {}).get("package-dir", {}).items():
        if not package:
            continue
        link = dest.joinpath(*package.split("."))
        if not link.exists():
            link.symlink_to(dest / folder, target_is_directory=True)
    return commit


def tree_env(tree: Path) -> dict:
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": str(tree)}


def check_imports_from(tree: Path) -> None:
    """Fail unless ``hybridload`` and its CPU engine (``_kernels``, or ``kernels`` in an older
    revision) import from ``tree`` with its environment."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tree, env=tree_env(tree), capture_output=True, text=True, timeout=300
    )
    got = out.stdout.split()
    if out.returncode or len(got) != 2 or any(not Path(p).resolve().is_relative_to(tree.resolve()) for p in got):
        raise RuntimeError(f"the revision in {tree} does not import its own package: {out.stdout}{out.stderr[-2000:]}")


def run_bench(tree: Path, script: str, args: list[str], out: Path, timeout_s: float) -> dict:
    cmd = [sys.executable, str(tree / "benchmarks" / script), *args, "--out", str(out)]
    log.info("%s", shlex.join(cmd))
    proc = subprocess.run(cmd, cwd=tree, env=tree_env(tree), capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode:
        raise RuntimeError(f"{shlex.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    ap.add_argument("--base", required=True, help="the revision before (any git revision: main~5, a tag, a commit)")
    ap.add_argument("--head", default="HEAD", help="the revision after")
    ap.add_argument("--benches", default=",".join(BENCHES), help=f"comma-separated subset of {', '.join(BENCHES)}")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each benchmark per revision, alternating")
    ap.add_argument(
        "--bench-args",
        nargs=2,
        action="append",
        default=[],
        metavar=("BENCH", "ARGS"),
        help="replace a benchmark's arguments, e.g. --bench-args kernels '--n 64 --no-dali'",
    )
    ap.add_argument("--quick", action="store_true", help=f"each benchmark with {QUICK_ARGS}, one repeat")
    ap.add_argument(
        "--root",
        type=Path,
        default=REPO / "data" / "bench-photos",
        help="the photo sets both revisions read (generated on first use)",
    )
    ap.add_argument("--goal", type=float, default=GOAL, help="head / base wanted at least")
    ap.add_argument("--run-timeout", type=float, default=1800, help="seconds one benchmark run may take")
    ap.add_argument("--out", type=Path, default=None, help="write the runs and rows as JSON here")
    args = ap.parse_args(argv)
    h.setup_logging()
    benches = [b for b in args.benches.split(",") if b]
    unknown = sorted(set(benches) - set(BENCHES)) + sorted({b for b, _ in args.bench_args} - set(BENCHES))
    if unknown:
        ap.error(f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHES)}")
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1, not {args.repeats}")
    repeats = 1 if args.quick else args.repeats
    bench_args = {b: shlex.split(QUICK_ARGS if args.quick else BENCHES[b][1]) for b in benches}
    bench_args.update({b: shlex.split(a) for b, a in args.bench_args})
    docs: dict[str, dict[str, list[dict]]] = {b: {"base": [], "head": []} for b in benches}
    with tempfile.TemporaryDirectory(prefix="hybridload-compare-") as tmp:
        trees, commits = {}, {}
        for side in ("base", "head"):
            trees[side] = Path(tmp) / side
            commits[side] = export(getattr(args, side), trees[side])
            check_imports_from(trees[side])
        for r in range(repeats):
            for b in benches:
                for side in order(r):
                    out = Path(tmp) / f"{b}-{side}-{r}.json"
                    extra = ["--root", str(args.root.resolve())]
                    docs[b][side].append(
                        run_bench(trees[side], BENCHES[b][0], bench_args[b] + extra, out, args.run_timeout)
                    )
    rows = {b: compare(docs[b]["base"], docs[b]["head"], args.goal) for b in benches}
    lines = [
        f"## compare_revisions: head {args.head} ({commits['head'][:10]}) / base {args.base} "
        f"({commits['base'][:10]}), {repeats} alternating repeat(s)\n"
    ]
    for b in benches:
        lines += [f"### {BENCHES[b][0]} {shlex.join(bench_args[b])}\n", *table(rows[b], args.goal), ""]
    lines.append(h.environment_line(h.environment()))
    print("\n".join(lines), flush=True)
    if args.out:
        h.write_json(
            args.out,
            {
                "benchmark": "compare_revisions",
                "base": commits["base"],
                "head": commits["head"],
                "bench_args": bench_args,
                "rows": rows,
                "runs": docs,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
