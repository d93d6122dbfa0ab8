"""gpu_check's section runner, its watchdog and the printed table.

Kept beside ``gpu_check.py`` (which imports it from its own folder): it needs nothing but
torch, numpy, Pillow and hybridload.

A section is a function returning a dict with ``status`` "ok" | "skipped" | "fail" | "error".
Three rules keep the exit status honest:

* a section that raised for a missing optional package is ``skipped`` naming the package;
* a section that says ``gpu_decode_ran: False`` (no GPU decode happened: the engine is not
  installed, the loader fell back to the CPU lane) is ``skipped`` with its ``why``, never a
  pass or a fail;
* a section still running at its limit is left behind (its thread is a daemon), recorded as
  ``error`` with its stack, and the run goes on; the process then ends with ``os._exit``.

Each section's rows are printed as it ends, and the JSON is written after every section.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path

log = logging.getLogger("gpu_check")

OPTIONAL = {
    "ray": "ray",
    "nvidia": "nvidia-dali",
    "torchvision": "torchvision",
    "torchcodec": "torchcodec",
    "skimage": "scikit-image",
    "matplotlib": "matplotlib",
    "sklearn": "scikit-learn",
    "pynvml": "nvidia-ml-py",
    "cupy": "cupy",
}


def skipped(reason: str) -> dict:
    return {"status": "skipped", "reason": reason}


def no_gpu_decode(why: str, **record) -> dict:
    """A section's value when no GPU decode ran: never a pass or a fail."""
    return {**record, "gpu_decode_ran": False, "why": why}


def missing_optional(exc: BaseException) -> str | None:
    """The optional package whose absence raised ``exc`` (walking its causes), or None."""
    seen = exc
    while seen is not None:
        if isinstance(seen, ImportError):
            name = (getattr(seen, "name", None) or "").split(".")[0]
            if name in OPTIONAL:
                return OPTIONAL[name]
            text = str(seen)
            for mod, pkg in OPTIONAL.items():
                if f"needs {pkg}" in text or f"No module named '{mod}" in text:
                    return pkg
        seen = seen.__cause__ or seen.__context__
    return None


def verdict(value) -> dict:
    """A section's returned value with its final status (the rules of the module docstring)."""
    value = dict(value) if isinstance(value, dict) else {"value": value}
    if value.get("gpu_decode_ran") is False and value.get("status") != "error":
        value.update(status="skipped", reason=f"no GPU decode ran: {value.get('why', 'unknown')}")
    value.setdefault("status", "ok")
    return value


def _stack_of(thread: threading.Thread) -> str:
    frame = sys._current_frames().get(thread.ident)
    return "".join(traceback.format_stack(frame))[-3000:] if frame is not None else ""


class Sections:
    """Runs named sections in order under a watchdog, writing the JSON after each one.

    Args:
        out: the JSON file.
        budget_s: the whole run's budget in seconds; a section that would start past it is
            skipped (reason "budget"), and sections read :meth:`time_left` to stop early.
        section_s: the longest a section may run before the watchdog leaves it behind.
        show: called with each section's printed rows (default: print to stdout).
        grace_s: how long past its limit a section may take to notice :meth:`time_left` and end.
    """

    def __init__(
        self, out: str, budget_s: float | None = None, section_s: float = 150.0, show=None, grace_s: float = 30.0
    ):
        self.out, self.budget_s, self.section_s, self.t0 = out, budget_s, section_s, time.monotonic()
        self.grace_s = grace_s
        self.report: dict = {}
        self.hung: list[str] = []
        self._section_end = float("inf")
        self.show = show or (lambda text: print(text, flush=True))

    def restart_budget(self, budget_s: float | None) -> None:
        """The budget from now on (the figure sections' own, after the tests)."""
        self.t0, self.budget_s = time.monotonic(), budget_s

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def time_left(self) -> float:
        """Seconds the running section has before its limit or the run's budget, whichever is first."""
        end = self._section_end
        if self.budget_s is not None:
            end = min(end, self.t0 + self.budget_s)
        return end - time.monotonic()

    def save(self) -> None:
        tmp = f"{self.out}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.report, f, indent=1, default=str)
        os.replace(tmp, self.out)

    def set(self, name: str, value: dict) -> dict:
        self.report[name] = value
        self.save()
        rows = section_rows(name, value, self.report)
        if rows:
            self.show(format_rows(rows, header=False))
        return value

    def run(self, name: str, fn, budgeted: bool = True, limit_s: float | None = None) -> dict:
        if budgeted and self.budget_s is not None and self.elapsed() >= self.budget_s:
            return self.set(name, {**skipped("budget"), "elapsed_s": round(self.elapsed(), 1)})
        limit = limit_s or self.section_s
        t = time.monotonic()
        self._section_end = t + limit
        log.info("section %s (%.0f s in, limit %.0f s)", name, self.elapsed(), limit)
        box: dict = {}

        def body():
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - reported as the section's result
                box["exc"], box["tb"] = exc, traceback.format_exc()[-3000:]

        worker = threading.Thread(target=body, name=f"gpu_check-{name}", daemon=True)
        worker.start()
        worker.join(limit + self.grace_s)
        self._section_end = float("inf")
        if worker.is_alive():
            self.hung.append(name)
            log.error("section %s still running after %.0f s: left behind", name, limit + self.grace_s)
            value = {
                "status": "error",
                "error": f"watchdog: still running after {limit + self.grace_s:.0f} s",
                "stack": _stack_of(worker),
            }
        elif "exc" in box:
            pkg = missing_optional(box["exc"])
            exc = box["exc"]
            if pkg:
                value = skipped(f"needs {pkg}, which is not installed ({type(exc).__name__}: {exc})")
            else:
                log.error("section %s failed:\n%s", name, box["tb"])
                value = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": box["tb"]}
        else:
            value = verdict(box.get("value"))
        value["seconds"] = round(time.monotonic() - t, 2)
        return self.set(name, value)

    def failed(self) -> list[str]:
        return [k for k, v in self.report.items() if isinstance(v, dict) and v.get("status") in ("fail", "error")]


# -- the table: each section's rows, printed as it ends and all together at the end


def _status(v) -> str:
    return f"{v.get('status')}: {v.get('reason', v.get('error', ''))}"[:160]


def _fig(v, fmt="{:,.0f}") -> str:
    return "n/a" if v is None else fmt.format(v)


def section_rows(name: str, v: dict, report: dict) -> list[tuple[str, str]]:
    """The printed rows of one section (a skipped or failed one says why)."""
    if name == "environment":
        return [("machine", machine(v)), ("hybridload", str(v.get("hybridload"))), ("DALI", str(v.get("dali")))]
    status = v.get("status")
    if status not in ("ok", "fail"):
        return [(name, _status(v))]
    rows = [(name, status)]
    if name == "tests":
        rows.append(("GPU tests", _fig_counts(v)))
        said: dict = {}
        for t in v.get("tests", []):
            if t["outcome"] != "passed":
                said.setdefault((t["outcome"], t["detail"][-300:]), []).append(t["test"])
        for (outcome, detail), names in said.items():
            rows.append((f"{len(names)} {outcome}" if len(names) > 1 else names[0][:60], f"{outcome}: {detail}"))
    elif name == "headline":
        rows += [(k, _fig(v.get(k))) for k in ("raw_decode_img_s", "raw_decode_resize_img_s", "lane_alone_img_s")]
        rows.append(("lane alone / raw decode+resize", _fig(v.get("lane_vs_raw"), "{:.2f}")))
    elif name == "speed":
        for k, r in v.get("runs", {}).items():
            rows.append(
                (
                    f"trainer img/s: {k}",
                    f"{_fig(r.get('img_s'))} ({_fig(r.get('vs_ceiling'), '{:.2f}')}x ceiling; lanes {r.get('lanes')})",
                )
            )
    elif name == "plan":
        rows.append(("planned share / best swept", f"{v['planned_share']:.2f} / {v['best_swept_share']:.2f}"))
        rows.append(("split / sum of its lanes alone", _fig(v.get("split_vs_sum_of_lanes"), "{:.2f}")))
    elif name == "local_sweep":
        for n, r in v.items():
            if isinstance(r, dict):
                rows.append(
                    (
                        f"local {n}: threads / processes / DataLoader",
                        " / ".join(
                            _fig(r.get(k))
                            for k in ("hybridload_threads", "hybridload_processes", "torch_dataloader_workers")
                        ),
                    )
                )
    else:
        rows.append((name, json.dumps({k: x for k, x in v.items() if k not in ("status", "seconds")})[:160]))
    return rows


def _fig_counts(v: dict) -> str:
    counts = v.get("counts", {})
    return (
        ", ".join(f"{counts.get(k, 0)} {k}" for k in ("passed", "failed", "skipped")) + f" (pytest {v.get('pytest')})"
    )


def machine(env: dict) -> str:
    """The machine as RESULTS.md names it: GPU, driver, CUDA, torch, torchvision, CPU."""
    return (
        f"{env.get('device_name', '?')}, driver {env.get('driver')}, CUDA {env.get('torch_cuda')}, "
        f"torch {env.get('torch')}, torchvision {env.get('torchvision')}, Python {env.get('python')}, "
        f"{env.get('cpus')} x {env.get('cpu_model')}"
    )


def tests_record(
    results, code: int, log_tail: str, version: str, *, timed_out: bool = False, limit_s: float = 0
) -> dict:
    """The ``tests`` section from the JSON lines the GPU tests wrote as each ended and pytest's
    exit: ``fail`` when a test failed, ``error`` when pytest ended otherwise than by its verdict
    (a test past its limit, the run past ``limit_s``, a crash): what ran is kept either way."""
    tests = []
    if Path(results).exists():
        tests = [json.loads(line) for line in Path(results).read_text().splitlines() if line.strip()]
    counts: dict = {}
    for t in tests:
        counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    out: dict = {"pytest": version, "exit_code": code, "counts": counts, "tests": tests}
    failed = [t["test"] for t in tests if t["outcome"] == "failed"]
    if timed_out:
        out.update(status="error", error=f"the GPU tests ran past {limit_s:.0f} s and were ended", log_tail=log_tail)
    elif "Timeout (" in log_tail:
        out.update(
            status="error", error="a GPU test ran past its limit (--test-s): stacks in the log", log_tail=log_tail
        )
    elif failed:
        out.update(status="fail", reason=f"failed: {', '.join(failed)}")
    elif code not in (0,) or not tests:
        out.update(status="error", error=f"pytest exited {code} with {len(tests)} tests reported", log_tail=log_tail)
    return out


def _test(report: dict, name: str) -> dict | None:
    return next((t for t in report.get("tests", {}).get("tests", []) if t["test"] == name), None)


def _met(ok: bool | None, judged: bool = True) -> str:
    if not judged:
        return "— (CPU stand-in: not a GPU figure)"
    return "—" if ok is None else ("yes" if ok else "**no**")


def goals_table(report: dict) -> str:
    """The table for benchmarks/RESULTS.md: the machine, then each figure issue 50 asks for with
    its goal, then each GPU test's outcome; a figure not measured says why."""
    env = report.get("environment", {})
    rows: list[tuple[str, str, str]] = []
    on_gpu = str(env.get("device", "")).startswith("cuda")

    def met(ok: bool | None) -> str:
        return _met(ok, on_gpu)

    def why(section: str) -> str:
        v = report.get(section, {})
        return f"not measured: {v.get('reason') or v.get('error') or 'did not run'}"[:200]

    head = report.get("headline", {})
    if head.get("status") == "ok":
        ratio, lane = head["lane_vs_raw"], head["lane_alone_img_s"]
        rows.append(
            (
                "the torch engine's GPU lane >= 0.9x the raw nvJPEG decode + resize, same 256 JPEGs",
                f"{ratio:.2f}x (lane {lane:,.0f} img/s, raw {head['raw_decode_resize_img_s']:,.0f}; decode alone {head['raw_decode_img_s']:,.0f})",
                met(ratio >= 0.9),
            )
        )
        rows.append(
            ("images/s at batch 256 >= 8,000 (H100-class)", f"{lane:,.0f} (batch {head['batch']})", met(lane >= 8000))
        )
    else:
        rows += [("the GPU lane >= 0.9x the raw nvJPEG ceiling; >= 8,000 img/s at batch 256", why("headline"), "—")]
    sp = report.get("speed", {})
    if sp.get("status") == "ok":
        runs = sp["runs"]
        g = runs["hybridload_gpu"]
        others = ", ".join(
            f"{k} {_fig(r.get('vs_ceiling'), '{:.2f}')}x"
            for k, r in runs.items()
            if k not in ("hybridload_gpu", "ceiling_synthetic")
        )
        rows.append(
            (
                "ResNet-50 step fed by the loader (mode gpu) >= 0.95x the step on synthetic data",
                f"{g['vs_ceiling']:.2f}x ({g['img_s']:,.0f} vs {runs['ceiling_synthetic']['img_s']:,.0f} img/s; {others})",
                met(g["vs_ceiling"] >= 0.95),
            )
        )
    else:
        rows.append(("ResNet-50 step fed by the loader >= 0.95x synthetic data", why("speed"), "—"))
    pl = report.get("plan", {})
    if pl.get("status") == "ok" and pl.get("split_vs_sum_of_lanes") is not None:
        r = pl["split_vs_sum_of_lanes"]
        rows.append(
            (
                "the split >= 0.9x the sum of its lanes alone",
                f"{r:.2f}x at share {pl['planned_share']:.2f}",
                met(r >= 0.9),
            )
        )
        rows.append(
            (
                "the planner's share beside a training step",
                f"planned {pl['planned_share']:.2f}, best swept {pl['best_swept_share']:.2f}, at plan "
                f"{_fig(pl.get('at_plan_vs_best_swept'), '{:.2f}')}x the best swept",
                "measured",
            )
        )
    else:
        rows.append(("the split >= 0.9x the sum of its lanes alone; the planner's share", why("plan"), "—"))
    mem = _test(report, "test_device_memory_stays_flat_over_150_batches_and_returns_after_close")
    if mem and mem["outcome"] != "skipped":
        f = mem["figures"]
        rows.append(
            (
                "device memory flat over 150 batches, back after close()",
                f"+{f.get('at_20_mb')} MiB at batch 20, +{f.get('at_150_mb')} at 150, +{f.get('after_close_mb')} after close",
                met(mem["outcome"] == "passed"),
            )
        )
    else:
        rows.append(
            (
                "device memory flat over 150 batches",
                f"not measured: {(mem or {}).get('detail', 'the test did not run')}"[:200],
                "—",
            )
        )
    tol = [
        t
        for t in report.get("tests", {}).get("tests", [])
        if t["test"].startswith("test_gpu_engine_pixels") and t["outcome"] != "skipped"
    ]
    if tol:
        cells = "; ".join(
            f"{t['test'].split('[')[-1].rstrip(']')}: {t['figures'].get('mean')} / {t['figures'].get('p99')} / {t['figures'].get('max')}"
            for t in tol
        )
        rows.append(
            (
                "pixel |diff| against the CPU lane per chroma subsampling (mean / p99 / max)",
                cells,
                met(all(t["outcome"] == "passed" for t in tol)),
            )
        )
    else:
        rows.append(("pixel tolerance per chroma subsampling", "not measured: the tolerance tests did not run", "—"))
    nv = report.get("nvml", {})
    if nv.get("status") == "ok" and nv.get("available"):
        rows.append(
            (
                "NVML during the GPU lane's run",
                f"util mean {nv['util_mean']:.0f}%, max {nv['util_max']:.0f}%; engines {nv.get('engines')}",
                "measured",
            )
        )
    else:
        rows.append(
            (
                "NVML during the GPU lane's run",
                why("nvml") if nv.get("status") != "ok" else f"unavailable: {nv.get('reason')}",
                "—",
            )
        )
    lines = [
        f"Machine: {machine(env)}.",
        f"hybridload: {env.get('hybridload')}.",
        f"DALI: {env.get('dali')}.",
        f"GPU tests (`pytest -m gpu` over tests/gpu): {_fig_counts(report.get('tests', {}))}.",
        "",
        "| goal (issue 50) | measured | met |",
        "| --- | --- | --- |",
        *(f"| {a} | {b} | {c} |" for a, b, c in rows),
        "",
        "| GPU test | outcome | figures |",
        "| --- | --- | --- |",
        *(
            f"| {t['module']}::{t['test']} | {t['outcome']}{': ' + t['detail'][:160].replace('|', '/') if t['outcome'] != 'passed' else ''} | "
            f"{json.dumps(t['figures'])[:200].replace('|', '/')} |"
            for t in report.get("tests", {}).get("tests", [])
        ),
    ]
    return "\n".join(lines)


def format_rows(rows, header: bool = True) -> str:
    w = max([len(r[0]) for r in rows] + [5])
    lines = [f"| {'check'.ljust(w)} | value |", f"| {'-' * w} | ----- |"] if header else []
    return "\n".join(lines + [f"| {a.ljust(w)} | {b} |" for a, b in rows])


def table(report) -> str:
    """The printed summary of a report."""
    rows = [r for name, v in report.items() if isinstance(v, dict) for r in section_rows(name, v, report)]
    return format_rows(rows)
