#!/usr/bin/env python
"""The planner: how long ``hybridload profile`` takes, and how good its chosen GPU share is.

1. ``run_profile(source, imagenet_train(224), batch_size=64, seconds=3)`` in this process,
   timed; then the CLI ``hybridload profile DATA --out PLAN --plot PNG`` as a subprocess,
   timed (goal: under 60 s).
2. ``measure_loader(source, rec, 64, share, seconds=S, threads=2, gpu_threads=2, device=cpu)``
   swept over share 0.0, 0.1, ..., 1.0 and the plan's share (the CLI's too when it differs), in
   ``--passes`` passes (the order rotates and reverses per pass). Per share the median
   of every measurement at that share (grid and plan points pooled). Reported:
   throughput at the plan's share / the best swept (goal >= 0.95), and from the plan point's own
   measurements alone. In "split" mode ``gpu_share`` is a cap, so 1.0 is not "GPU lane only".
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import _harness as h
from _data import parser, photo_source
from hybridload import recipe
from hybridload.cli._profile import measure_loader, run_profile

log = logging.getLogger("bench_planner")
GOAL_PROFILE_S = 60.0
GOAL_PLAN_OVER_BEST = 0.95


def cli_profile(args, folder: Path, workdir: Path) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    plan, plot = workdir / "plan.json", workdir / "profile.png"
    cmd = [sys.executable, "-m", "hybridload", "profile", str(folder), "--out", str(plan), "--plot", str(plot)]
    cmd += ["--seconds", f"{args.seconds:g}", "--batch-size", str(args.batch_size), "--quiet"]
    log.info("CLI: %s", " ".join(cmd))
    r = h.timed(
        lambda: {"images": 0, "proc": subprocess.run(cmd, capture_output=True, text=True, timeout=args.cli_timeout)}
    )  # the CLI and all it ran
    proc = r["proc"]
    if proc.returncode != 0:
        raise RuntimeError(f"hybridload profile failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    doc = json.loads(plan.read_text())
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in proc.stdout.splitlines()]
    rows = {c[0]: c[1] for c in cells if len(c) == 2 and c[0] not in ("what", "") and not set(c[0]) <= {"-"}}
    return {
        "command": cmd,
        "wall_s": r["wall_s"],
        "gpu_share": doc["gpu_share"],
        "predicted": doc.get("predicted"),
        "plot_bytes": plot.stat().st_size if plot.exists() else 0,
        "other_load": r["other_load"],
        "stdout": proc.stdout,
        "rows": rows,
    }  # rows: the CLI's markdown table as {what: value}


def main(argv=None) -> int:
    ap = parser(
        __doc__,
        quick=dict(n=64, seconds=1.0, passes=1, step=0.5, cli=False),
        batch_size=64,
        size=224,
        gpu_threads=2,
        torch_threads=1,
    )
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement (profile and sweep)")
    ap.add_argument("--passes", type=int, default=2, help="passes over the shares")
    ap.add_argument("--step", type=float, default=0.1, help="share grid step")
    ap.add_argument("--threads", type=int, default=2, help="in-process lane threads of measure_loader")
    ap.add_argument("--cli", action=argparse.BooleanOptionalAction, default=True, help="also time the CLI")
    ap.add_argument("--cli-timeout", type=float, default=300.0)
    args = ap.parse_args(argv)
    if args.step > 1:
        ap.error("--step must be in (0, 1]")

    torch.set_num_threads(args.torch_threads)
    folder, source = photo_source(args.root, args.n, log)
    rec = recipe.imagenet_train(args.size)
    env = h.environment()
    t_start = time.perf_counter()

    # ---- 1. the profile, in process and through the CLI
    r = h.timed(
        lambda: {
            "images": 0,
            "prof": run_profile(
                source, rec, batch_size=args.batch_size, seconds=args.seconds, device=torch.device("cpu")
            ),
        }
    )
    prof, plan_share = r["prof"], float(r["prof"].plan.gpu_share)
    profile = {
        "wall_s": r["wall_s"],
        "reported_s": prof.seconds,
        "gpu_share": plan_share,
        "predicted": prof.plan.predicted,
        "reason": prof.plan.reason,
        "bottleneck": prof.plan.bottleneck,
        "checked_points": prof.points,
        "rows": prof.rows,
        "other_load": r["other_load"],
    }
    cli = None
    if args.cli:
        with tempfile.TemporaryDirectory(prefix="bench-planner-") as tmp:
            cli = cli_profile(args, folder, Path(tmp))

    # ---- 2. the sweep
    grid = sorted({round(min(1.0, i * args.step), 4) for i in range(round(1 / args.step) + 1)} | {1.0})
    points = [("grid", s) for s in grid] + [("plan", plan_share)]
    if cli is not None and abs(cli["gpu_share"] - plan_share) > 0.005:
        points.append(("plan (CLI)", float(cli["gpu_share"])))
    per_point: dict[tuple[str, float], list[dict]] = {p: [] for p in points}
    log.info("sweep: %d points x %d passes x %.0f s", len(points), args.passes, args.seconds)
    for pas in range(args.passes):
        cut = (pas * len(points)) // args.passes
        for p in (points[cut:] + points[:cut])[:: -1 if pas % 2 else 1]:
            r = h.timed(
                lambda: {
                    "images": 0,
                    "rate": measure_loader(  # with the other load meanwhile
                        source,
                        rec,
                        args.batch_size,
                        p[1],
                        seconds=args.seconds,
                        threads=args.threads,
                        gpu_threads=args.gpu_threads,
                        device=torch.device("cpu"),
                    ),
                }
            )
            per_point[p].append(r)
            log.info(
                "pass %d/%d  %-10s share %.3f  %6.0f img/s  (%.1f s, other load %s)",
                pas + 1,
                args.passes,
                p[0],
                p[1],
                r["rate"],
                r["wall_s"],
                h.fmt(r["other_load"], ".2f"),
            )
    total_s = time.perf_counter() - t_start

    def at(share: float) -> list[float]:
        """Every measurement of this share (grid and plan points at the same share are one configuration)."""
        return [r["rate"] for p in points if abs(p[1] - share) < 1e-9 for r in per_point[p]]

    table = []
    for p in points:
        rates = [r["rate"] for r in per_point[p]]
        other = [r["other_load"] for r in per_point[p] if r["other_load"] is not None]
        table.append(
            {
                "kind": p[0],
                "share": p[1],
                "value": statistics.median(at(p[1])),
                "measurements": len(at(p[1])),
                "own": statistics.median(rates),
                "max": max(rates),
                "median": statistics.median(rates),
                "min": min(rates),
                "passes": rates,
                "median_other_load": statistics.median(other) if other else None,
            }
        )
    swept = [t for t in table if t["kind"] == "grid"]
    best = max(swept, key=lambda t: t["value"])
    plan_row = next(t for t in table if t["kind"] == "plan")
    plan_ratio = plan_row["value"] / best["value"]
    plan_ratio_own = plan_row["own"] / max(t["own"] for t in swept)  # the plan point's own passes only
    cli_row = next((t for t in table if t["kind"] == "plan (CLI)"), None)
    runs = {
        "in process": ("run_profile (in process)", profile),
        "CLI": ("`hybridload profile` CLI (subprocess, with --plot)", cli),
    }
    goals = {
        f"profile under 60 s ({k})": None if r is None else r["wall_s"] < GOAL_PROFILE_S
        for k, (_label, r) in runs.items()
    }
    goals[f"plan share / best swept >= {GOAL_PLAN_OVER_BEST}"] = plan_ratio >= GOAL_PLAN_OVER_BEST

    met = lambda ok: "n/a" if ok is None else "met" if ok else "**NOT met**"  # noqa: E731
    prof_rows = [
        [
            label,
            f"{r['wall_s']:.1f}",
            f"{r['gpu_share']:.3f}",
            h.fmt(r["other_load"], ".2f"),
            met(goals[f"profile under 60 s ({k})"]),
        ]
        for k, (label, r) in runs.items()
        if r is not None
    ]
    cli_note = (
        []
        if cli is None
        else [
            "CLI (its own process, torch's default intra-op threads): "
            + "; ".join(
                f"{k}: {v}"
                for k, v in cli["rows"].items()
                if k in ("CPU lane, trainer node", "GPU lane") or k.startswith("measured at share")
            )
            + ".\n"
        ]
    )
    cli_ratio = (
        f"; the CLI's plan (share {cli_row['share']:.3f}): {cli_row['value'] / best['value']:.3f}x" if cli_row else ""
    )
    out = [
        f"## bench_planner: {args.n} photo JPEGs, imagenet_train({args.size}), batch {args.batch_size}, "
        f"{args.seconds:g} s per measurement, {args.passes} passes (median per share)\n",
        h.environment_line(env).rstrip() + " GPU lane: DALI CPU-only mode (no GPU).\n",
        "### Profile time\n",
        *h.markdown_table(["run", "wall s", "chosen GPU share", "other load", "goal < 60 s"], prof_rows),
        "",
        f"Plan: {prof.plan.reason} (bottleneck: {prof.plan.bottleneck}); predicted "
        + ", ".join(f"{k} {v:.0f}" for k, v in prof.plan.predicted.items())
        + " img/s; the profile's own checks: "
        + ", ".join(f"share {s:.2f}: {r:.0f}" for s, r in prof.points)
        + " img/s.\n",
        *cli_note,
        "### Sweep: measure_loader throughput against GPU share\n",
        *h.markdown_table(
            [
                "point",
                "GPU share",
                "median img/s at this share (measurements)",
                "this point's passes",
                "other load",
            ],
            [
                [
                    t["kind"] + (" **best**" if t is best else ""),
                    f"{t['share']:.3f}",
                    f"{t['value']:.0f} ({t['measurements']})",
                    " / ".join(f"{x:.0f}" for x in t["passes"]),
                    h.fmt(t["median_other_load"], ".2f"),
                ]
                for t in table
            ],
        ),
        "",
        f"- best swept share: {best['share']:.2f} ({best['value']:.0f} img/s); the plan's share "
        f"{plan_share:.3f}: {plan_row['value']:.0f} img/s",
        f"- plan / best swept: **{plan_ratio:.3f}x** (median per share, measurements at the same "
        f"share pooled; from the plan point's own passes alone {plan_ratio_own:.3f}x){cli_ratio}",
        f"- goal plan / best swept >= {GOAL_PLAN_OVER_BEST}: "
        + met(goals[f"plan share / best swept >= {GOAL_PLAN_OVER_BEST}"]),
        f"- total benchmark time {total_s:.0f} s",
        "",
    ]
    h.emit(
        out,
        args,
        {
            "benchmark": "bench_planner",
            "dataset": str(folder),
            "environment": env,
            "profile": profile,
            "cli": cli,
            "sweep": table,
            "best_swept": best,
            "plan_over_best": plan_ratio,
            "plan_over_best_own_passes": plan_ratio_own,
            "goals": goals,
        },
        log,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
