"""gpu_check's pixel sections: tolerance per chroma subsampling (measured, then judged) and
DALI's decoders.

Tolerance: nvJPEG's hardware path does not use libjpeg-turbo's fancy upsampling, so on 4:2:x
JPEGs a GPU engine differs from the CPU lane by more than rounding (a CPU proxy gives a
mean of 0.23 grey levels on 4:2:0, 0.77 on the worst image). So the run measures mean, p99
and max |diff| per engine on 4:4:4, 4:2:2, 4:2:0 and greyscale JPEGs and judges them with
:func:`judge`: a difference the size of rounding or upsampling is never a fault (above the
documented bound it says the docs must state the measured figure); only a gross difference
(a wrong box, flip or batch) fails.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from _gpu_headline import host_images
from _gpu_sections import missing_optional, skipped

# README, "Pixels": a GPU engine's mean absolute difference from the CPU lane stays under this
DOCUMENTED_MEAN = 0.5
# differences no decoder rounding or chroma upsampling makes: a wrong crop box, flip or batch
GROSS_MEAN, GROSS_P99 = 2.0, 24
SUBSAMPLINGS = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2, "grey": None}  # Pillow's ``subsampling`` codes


def subsampled_folders(src, root: Path, n: int) -> dict[str, str]:
    """The first ``n`` images of ``src`` re-encoded (quality 90) at each chroma subsampling and
    in greyscale: {name: ImageFolder root}."""
    out = {}
    for name, code in SUBSAMPLINGS.items():
        d = root / f"sub{name.replace(':', '')}" / "class_000"
        d.mkdir(parents=True, exist_ok=True)
        for i in range(min(n, len(src))):
            with Image.open(src.ref(i).location) as im:
                buf = io.BytesIO()
                if code is None:
                    im.convert("L").save(buf, format="JPEG", quality=90)
                else:
                    im.convert("RGB").save(buf, format="JPEG", quality=90, subsampling=code)
            (d / f"img_{i:04d}.jpg").write_bytes(buf.getvalue())
        out[name] = str(d.parent)
    return out


def diff_stats(hist: np.ndarray) -> dict:
    """Mean, p99 and max of |diff| from its histogram (256 bins, one per grey level)."""
    n = int(hist.sum())
    if n == 0:
        return {"mean": None, "p99": None, "max": None, "pixels": 0}
    levels = np.arange(len(hist))
    cum = np.cumsum(hist)
    return {
        "mean": float((hist * levels).sum() / n),
        "p99": int(np.searchsorted(cum, 0.99 * n)),
        "max": int(levels[hist > 0].max()),
        "pixels": n,
    }


def engine_vs_cpu(make_lane, src, rec, bs) -> dict:
    """|diff| statistics of a GPU engine's uint8 batches against the CPU lane's, over the folder."""
    from hybridload.lanes.cpu_job import process_batch
    from hybridload.lanes.base import BatchTask

    lane = make_lane(src, rec, bs)
    hist = np.zeros(256, np.int64)
    try:
        for k in range(max(1, len(src) // bs)):
            idx = np.arange(k * bs, (k + 1) * bs) % len(src)
            got = host_images(lane.run_batch(BatchTask(k, 0, idx)))
            want = process_batch(src, rec, idx, 0, 0).images
            hist += torch.bincount((got.int() - want.int()).abs().flatten(), minlength=256).numpy()
        return {"engine": lane.describe(), **diff_stats(hist)}
    finally:
        lane.close()


def judge(row: dict, documented: float = DOCUMENTED_MEAN) -> tuple[str, bool]:
    """(verdict, is a fault) for one engine on one set: gross differences are faults; a mean
    above the documented bound is a rounding difference the docs must state, not a fault."""
    if row["mean"] is None:
        return "no pixels compared", False
    if row["mean"] > GROSS_MEAN or row["p99"] > GROSS_P99:
        return (
            f"fault: mean {row['mean']:.3f} / p99 {row['p99']} is beyond rounding and upsampling "
            f"(> {GROSS_MEAN} / {GROSS_P99}): a wrong box, flip or batch"
        ), True
    if row["mean"] > documented:
        return f"above the documented {documented}: state the measured {row['mean']:.2f} in the docs", False
    return f"within the documented {documented}", False


def tolerance(folders: dict[str, str], rec, bs, engines: dict) -> dict:
    """Each GPU engine vs the CPU lane on every set, measured then judged.

    ``engines``: {name: lane factory (src, rec, bs) -> lane, or a reason string when it cannot run}.
    """
    from hybridload import sources

    out: dict = {"documented_mean": DOCUMENTED_MEAN, "gross_mean": GROSS_MEAN, "gross_p99": GROSS_P99, "engines": {}}
    faults, ran = [], False
    for engine, make in engines.items():
        if isinstance(make, str):
            out["engines"][engine] = skipped(make)
            continue
        rows: dict = {}
        for name, folder in folders.items():
            try:
                rows[name] = engine_vs_cpu(make, sources.ImageFolder(folder), rec, bs)
            except Exception as exc:
                pkg = missing_optional(exc)
                if pkg is None:
                    raise
                rows = skipped(f"needs {pkg}, which is not installed")
                break
            rows[name]["verdict"], fault = judge(rows[name])
            ran = True
            if fault:
                faults.append(f"{engine} on {name}: {rows[name]['verdict']}")
        out["engines"][engine] = rows
    if not ran:
        return {
            **out,
            "gpu_decode_ran": False,
            "why": "; ".join(f"{k}: {v.get('reason')}" for k, v in out["engines"].items()),
        }
    if faults:
        out.update(status="fail", reason="; ".join(faults))
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
            return fn.decoders.image_slice(
                enc, anchor, shape, device=dev, normalized_anchor=False, normalized_shape=False, **opts
            )
        return fn.slice(
            fn.decoders.image(enc, device=dev, **opts), anchor, shape, normalized_anchor=False, normalized_shape=False
        )

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
    out: dict = {
        "dali": nvidia.dali.__version__,
        "nvjpeg": nvj,
        "lane_decoder": "decoders.image_slice(jpeg_fancy_upsampling=True), pipelines/builder.py",
        "variants": {},
    }
    variants = {
        "full_decode_then_slice_fancy": (False, True),
        "roi_decode_fancy": (True, True),
        "roi_decode_no_fancy": (True, False),
    }
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
                d = np.abs(np.asarray(got.at(k)).astype(int) - r[y : y + h, x : x + w].astype(int))
                diffs.append((float(d.mean()), int(d.max())))
            rows[sname] = {
                "mean_abs_diff": float(np.mean([m for m, _ in diffs])),
                "max_abs_diff": max(x for _, x in diffs),
                "images_per_s": rate,
                "expected_backend": "CPU (DALI CPU-only mode)"
                if device_id is None
                else expected_backend(fancy, sname, nvj),
            }
        out["variants"][vname] = rows
        del pipe
    return out
