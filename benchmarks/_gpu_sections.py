"""gpu_check's section runner and its pixel sections (tolerance per chroma subsampling, DALI's decoders).

Kept beside ``gpu_check.py`` (which imports it from its own folder): it needs nothing but
torch, numpy, Pillow and hybridload; DALI and torchvision are imported inside the sections
that use them, and their absence makes those sections ``skipped``, naming the package.
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
import traceback
from pathlib import Path

import numpy as np
import torch
from PIL import Image

log = logging.getLogger("gpu_check")

# README, "Pixels": a GPU engine's mean absolute difference from the CPU lane stays under this
README_MEAN_TOL = 0.5
SUBSAMPLINGS = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}  # Pillow's ``subsampling`` codes
OPTIONAL = {"ray": "ray", "nvidia": "nvidia-dali", "torchvision": "torchvision", "skimage": "scikit-image",
            "matplotlib": "matplotlib", "sklearn": "scikit-learn", "pynvml": "nvidia-ml-py", "cupy": "cupy"}


def skipped(reason: str) -> dict:
    return {"status": "skipped", "reason": reason}


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


class Sections:
    """Runs named sections in order, writing the JSON after each one (a time-out keeps what ran).

    A section past ``budget_s`` (seconds since start) is ``{"status": "skipped", "reason": "budget"}``;
    one that raised for a missing optional package is skipped naming it; any other exception is
    ``{"status": "error", ...}`` with the traceback's tail, and the run goes on.
    """

    def __init__(self, out: str, budget_s: float | None = None):
        self.out, self.budget_s, self.t0 = out, budget_s, time.monotonic()
        self.report: dict = {}

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def save(self) -> None:
        tmp = f"{self.out}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.report, f, indent=1, default=str)
        os.replace(tmp, self.out)

    def set(self, name: str, value: dict) -> dict:
        self.report[name] = value
        self.save()
        return value

    def run(self, name: str, fn, budgeted: bool = True) -> dict:
        if budgeted and self.budget_s is not None and self.elapsed() >= self.budget_s:
            return self.set(name, {**skipped("budget"), "elapsed_s": round(self.elapsed(), 1)})
        t = time.monotonic()
        log.info("section %s (%.0f s in)", name, self.elapsed())
        try:
            value = fn()
            value = dict(value) if isinstance(value, dict) else {"value": value}
            value.setdefault("status", "ok")
        except Exception as exc:
            pkg = missing_optional(exc)
            if pkg:
                value = skipped(f"needs {pkg}, which is not installed ({type(exc).__name__}: {exc})")
            else:
                log.exception("section %s failed", name)
                value = {"status": "error", "error": f"{type(exc).__name__}: {exc}",
                         "traceback": traceback.format_exc()[-3000:]}
        value["seconds"] = round(time.monotonic() - t, 2)
        return self.set(name, value)

    def failed(self) -> list[str]:
        return [k for k, v in self.report.items() if isinstance(v, dict) and v.get("status") in ("fail", "error")]


def subsampled_folders(src, root: Path, n: int) -> dict[str, str]:
    """The first ``n`` images of ``src`` re-encoded (quality 90) at each chroma subsampling: {name: folder}."""
    out = {}
    for name, code in SUBSAMPLINGS.items():
        d = root / f"sub{name.replace(':', '')}" / "class_000"
        d.mkdir(parents=True, exist_ok=True)
        for i in range(min(n, len(src))):
            with Image.open(src.ref(i).location) as im:
                buf = io.BytesIO()
                im.convert("RGB").save(buf, format="JPEG", quality=90, subsampling=code)
            (d / f"img_{i:04d}.jpg").write_bytes(buf.getvalue())
        out[name] = str(d.parent)
    return out


def _diff(a: torch.Tensor, b: torch.Tensor) -> tuple[float, int]:
    d = (a.cpu().int() - b.cpu().int()).abs()
    return d.float().mean().item(), int(d.max().item())


def engine_vs_cpu(make_lane, src, rec, bs) -> dict:
    """Mean/max |diff| of a GPU engine's uint8 batches against the CPU lane's, over the whole folder."""
    from hybridload.kernels import process_batch
    from hybridload.lanes.base import BatchTask
    lane = make_lane(src, rec, bs)
    means, maxes = [], []
    try:
        for k in range(max(1, len(src) // bs)):
            idx = np.arange(k * bs, (k + 1) * bs) % len(src)
            m, x = _diff(lane.run_batch(BatchTask(k, 0, idx)).images, process_batch(src, rec, idx, 0, 0).images)
            means.append(m)
            maxes.append(x)
        return {"engine": lane.describe(), "mean_abs_diff": float(np.mean(means)),
                "mean_abs_diff_worst_batch": max(means), "max_abs_diff": max(maxes)}
    finally:
        lane.close()


def tolerance(folders: dict[str, str], rec, bs, engines: dict) -> dict:
    """Each GPU engine vs the CPU lane on 4:4:4, 4:2:2 and 4:2:0 JPEGs; "fail" above README_MEAN_TOL.

    ``engines``: {name: lane factory (src, rec, bs) -> lane, or a reason string when it cannot run}.
    """
    from hybridload import sources
    out: dict = {"readme_mean_tolerance": README_MEAN_TOL, "engines": {}}
    bad = []
    for engine, make in engines.items():
        if isinstance(make, str):
            out["engines"][engine] = skipped(make)
            continue
        rows = {}
        for name, folder in folders.items():
            try:
                rows[name] = engine_vs_cpu(make, sources.ImageFolder(folder), rec, bs)
            except Exception as exc:
                pkg = missing_optional(exc)
                if pkg is None:
                    raise
                rows = skipped(f"needs {pkg}, which is not installed")
                break
            if rows[name]["mean_abs_diff_worst_batch"] > README_MEAN_TOL:
                bad.append(f"{engine} on {name}: mean |diff| {rows[name]['mean_abs_diff_worst_batch']:.3f}")
        out["engines"][engine] = rows
    if bad:
        out.update(status="fail", reason="above the README's figure: " + "; ".join(bad))
    return out


def nvjpeg_version() -> str | None:
    """The installed nvJPEG wheel's version (nvidia-nvjpeg-cu12 / -cu13), or None."""
    from importlib import metadata
    for dist in ("nvidia-nvjpeg-cu13", "nvidia-nvjpeg-cu12", "nvidia-nvjpeg"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def expected_backend(fancy: bool, subsampling: str, nvjpeg: str | None) -> str:
    """Where DALI's mixed ``image_slice`` decodes: with fancy upsampling on 4:2:x JPEGs, nvJPEG before
    13.2 cannot, and DALI falls back to its CPU decoder (issue 22, part 3)."""
    if not fancy or subsampling == "4:4:4":
        return "GPU (nvJPEG)"
    try:
        new = tuple(int(p) for p in (nvjpeg or "0").split(".")[:2]) >= (13, 2)
    except ValueError:
        new = False
    return "GPU (nvJPEG)" if new else "CPU (DALI's fallback: nvJPEG < 13.2 has no fancy upsampling for 4:2:x)"


def _dali_variant(device_id, bs, roi: bool, fancy: bool):
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=bs, num_threads=4, device_id=device_id, prefetch_queue_depth=1, exec_dynamic=True)
    def graph():
        enc = fn.external_source(name="encoded", dtype=types.UINT8, ndim=1)
        anchor = fn.external_source(name="anchor", dtype=types.FLOAT, ndim=1)
        shape = fn.external_source(name="shape", dtype=types.FLOAT, ndim=1)
        dev = "cpu" if device_id is None else "mixed"
        opts = dict(output_type=types.RGB, jpeg_fancy_upsampling=fancy, adjust_orientation=False)
        if roi:
            return fn.decoders.image_slice(enc, anchor, shape, device=dev, normalized_anchor=False,
                                           normalized_shape=False, **opts)
        return fn.slice(fn.decoders.image(enc, device=dev, **opts), anchor, shape,
                        normalized_anchor=False, normalized_shape=False)
    pipe = graph()
    pipe.build()
    return pipe


def dali_decoders(folders: dict[str, str], bs: int, device_id: int | None, reps: int = 3) -> dict:
    """Full decode + slice (fancy upsampling, as the CPU lane) and ROI decode with and without it,
    each against the CPU kernels' decode of the same box: mean/max |diff|, images/s, expected backend.
    ``device_id=None`` runs DALI's CPU-only mode (the tests' stand-in)."""
    import nvidia.dali
    from hybridload.kernels import decode_image
    nvj = nvjpeg_version()
    out: dict = {"dali": nvidia.dali.__version__, "nvjpeg": nvj,
                 "lane_decoder": "decoders.image_slice(jpeg_fancy_upsampling=True), pipelines/builder.py",
                 "variants": {}}
    variants = {"full_decode_then_slice_fancy": (False, True), "roi_decode_fancy": (True, True),
                "roi_decode_no_fancy": (True, False)}
    for vname, (roi, fancy) in variants.items():
        pipe, rows = _dali_variant(device_id, bs, roi, fancy), {}
        for sname, folder in folders.items():
            files = sorted(Path(folder).rglob("*.jpg"))
            files = (files * (bs // max(1, len(files)) + 1))[:bs]
            payloads = [f.read_bytes() for f in files]
            refs = [decode_image(p) for p in payloads]
            # DALI's default "WH" axis order: anchor [x, y], shape [w, h]
            anchors = [np.array([r.shape[1] // 6, r.shape[0] // 8], np.float32) for r in refs]
            shapes = [np.array([r.shape[1] // 2, r.shape[0] // 2], np.float32) for r in refs]
            t0, got = time.perf_counter(), None
            for _ in range(reps):
                pipe.feed_input("encoded", [np.frombuffer(p, np.uint8) for p in payloads])
                pipe.feed_input("anchor", anchors)
                pipe.feed_input("shape", shapes)
                (got,) = pipe.run()
                got = got.as_cpu() if hasattr(got, "as_cpu") else got
            rate = reps * bs / (time.perf_counter() - t0)
            diffs = []
            for k, r in enumerate(refs):
                (x, y), (w, h) = anchors[k].astype(int), shapes[k].astype(int)
                d = np.abs(np.asarray(got.at(k)).astype(int) - r[y:y + h, x:x + w].astype(int))
                diffs.append((float(d.mean()), int(d.max())))
            rows[sname] = {"mean_abs_diff": float(np.mean([m for m, _ in diffs])),
                           "max_abs_diff": max(x for _, x in diffs), "images_per_s": rate,
                           "expected_backend": "CPU (DALI CPU-only mode)" if device_id is None
                           else expected_backend(fancy, sname, nvj)}
        out["variants"][vname] = rows
        del pipe
    return out


def _status(v) -> str:
    return f"{v.get('status')}: {v.get('reason', v.get('error', ''))}"[:150]


def table(report) -> str:
    """The printed summary of a report (skipped and failed sections say why)."""
    rows = [("device", report["environment"].get("device_name", "?"))]
    c = report.get("correctness", {})
    if c.get("status") == "ok":
        px = c["pixels"]
        rows += [("pixels vs CPU lane", f"mean |diff| <= {px['mean_abs_diff_max']:.3f}, "
                                        f"> 2 off: {px['share_off_by_more_than_2_max']:.4%} ({px['engine']})"),
                 ("index streams identical", str(c["index_streams_identical"]))]
        for k in ("device_after_set_device", "gpu_memory"):
            if k in c:
                rows.append((k, str(c[k].get("ok", c[k].get("flat")))))
    else:
        rows.append(("correctness", _status(c)))
    o = report.get("ordering", {})
    rows.append(("ordering (stalled stream)", f"mean |diff| <= {o['mean_abs_diff_max']:.3f}; without the wait "
                                              f"{o['control_without_wait_mean_abs_diff_max']:.3f}"
                 if o.get("status") in ("ok", "fail") else _status(o)))
    t = report.get("tolerance", {})
    for engine, by_sub in t.get("engines", {}).items():
        for sub, r in by_sub.items():
            if isinstance(r, dict) and "mean_abs_diff" in r:
                rows.append((f"tolerance {engine} {sub}", f"mean {r['mean_abs_diff']:.3f}, max {r['max_abs_diff']}"))
        if by_sub.get("status") == "skipped":
            rows.append((f"tolerance {engine}", _status(by_sub)))
    if t.get("status") != "ok":
        rows.append(("tolerance", _status(t)))
    for vname, by_sub in report.get("dali_decoders", {}).get("variants", {}).items():
        for sub, r in by_sub.items():
            rows.append((f"DALI {vname} {sub}", f"mean {r['mean_abs_diff']:.3f}, max {r['max_abs_diff']}, "
                                                f"{r['images_per_s']:,.0f} img/s, {r['expected_backend']}"))
    for name in ("dali_decoders", "speed", "nvml", "plan", "local_sweep"):
        if report.get(name, {}).get("status") != "ok":
            rows.append((name, _status(report.get(name, {}))))
    speed = report.get("speed", {})
    if speed.get("status") == "ok":
        for k, v in speed.items():
            if isinstance(v, float) and k not in ("gpu_lane_cost_to_step", "seconds"):
                rows.append((f"trainer images/s: {k}", f"{v:,.0f} ({speed['ratios'].get(k, 1.0):.2f}x ceiling)"))
        rows.append(("GPU lane's cost to the step", f"{speed['gpu_lane_cost_to_step']:.1%}"))
    if report.get("plan", {}).get("status") == "ok":
        rows.append(("planned share / best swept", f"{report['plan']['planned_share']:.2f} / "
                                                   f"{report['plan']['best_swept_share']:.2f}"))
    if report.get("nvml", {}).get("status") == "ok":
        rows.append(("NVML during the step", json.dumps(report["nvml"])[:120]))
    for n, v in report.get("local_sweep", {}).items():
        if isinstance(v, dict):
            rows.append((f"local {n}: threads / processes / DataLoader workers",
                         f"{v['hybridload_threads']:,.0f} / {v.get('hybridload_processes', 0):,.0f} / "
                         f"{v['torch_dataloader_workers']:,.0f}"))
    w = max(len(r[0]) for r in rows)
    return "\n".join([f"| {'check'.ljust(w)} | value |", f"| {'-' * w} | ----- |"] +
                      [f"| {a.ljust(w)} | {b} |" for a, b in rows])
