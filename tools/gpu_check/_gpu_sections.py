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
        return [
            ("device", str(v.get("device_name", "?"))),
            (
                "stack",
                f"torch {v.get('torch')}, torchvision {v.get('torchvision')}, decoder {v.get('decoder_backend')}",
            ),
        ]
    status = v.get("status")
    if status not in ("ok", "fail"):
        return [(name, _status(v))]
    rows = [(name, status)]
    if name == "correctness":
        px = v["pixels"]
        rows += [
            ("pixels vs CPU lane", f"mean |diff| <= {px['mean_abs_diff_max']:.3f} ({px['engine']})"),
            ("index streams identical", str(v["index_streams_identical"])),
        ]
        for k in ("device_after_set_device", "gpu_memory"):
            if k in v:
                rows.append((k, json.dumps(v[k])[:160]))
    elif name == "ordering":
        rows += [
            ("stalled run == unstalled run", f"{v['equal_batches']}/{v['batches']} batches equal"),
            ("without the wait", v["control"]),
        ]
    elif name == "tolerance":
        for engine, by_set in v.get("engines", {}).items():
            if by_set.get("status") == "skipped":
                rows.append((f"tolerance {engine}", _status(by_set)))
                continue
            for sub, r in by_set.items():
                if isinstance(r, dict) and "mean" in r:
                    rows.append(
                        (
                            f"tolerance {engine} {sub}",
                            f"mean {r['mean']:.3f}, p99 {r['p99']}, max {r['max']}: {r['verdict']}",
                        )
                    )
    elif name == "headline":
        rows += [
            (k, _fig(v.get(k)))
            for k in (
                "raw_decode_img_s",
                "raw_decode_resize_img_s",
                "lane_alone_img_s",
                "lane_alone_prep_processes_img_s",
            )
        ]
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
    elif name == "device":
        for k in ("syncs", "auto_share"):
            rows.append((k, _status(v[k]) if v[k].get("status") == "skipped" else json.dumps(v[k])[:160]))
        for k, f in v.get("faults", {}).items():
            rows.append((f"fault {k}", _status(f) if f.get("status") == "skipped" else json.dumps(f)[:160]))
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


def format_rows(rows, header: bool = True) -> str:
    w = max([len(r[0]) for r in rows] + [5])
    lines = [f"| {'check'.ljust(w)} | value |", f"| {'-' * w} | ----- |"] if header else []
    return "\n".join(lines + [f"| {a.ljust(w)} | {b} |" for a, b in rows])


def table(report) -> str:
    """The printed summary of a report."""
    rows = [r for name, v in report.items() if isinstance(v, dict) for r in section_rows(name, v, report)]
    return format_rows(rows)
