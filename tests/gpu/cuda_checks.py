"""What the GPU tests (``tests/gpu/``) measure and judge, apart from CUDA so that
``tests/test_gpu_check.py`` can test the logic on a CPU: the GPU lane built through the lane
spec as the loader builds it, the ordering check under a stalled stream, and the pixel
tolerance per chroma subsampling (measured, then judged).

Imports only torch, numpy, Pillow, pytest and the installed hybridload: the GPU machine runs
these tests from a copy of this folder beside the wheel, with no checkout on ``sys.path``. The
folder has no conftest (a second ``conftest`` module would shadow the suite's): the fixtures
live here and each test module imports those it uses.

Ordering: torchvision's batched CUDA decode writes its outputs on a private stream that does
not wait for the caller's (torchvision PR #9606). A lane whose previous batch's kernels are
still queued on its stream could have the memory they read handed to the next decode and
overwritten; ``torch_lane.wait_until_idle`` before each decode prevents it. The check holds
every batch's ops up on the lane's stream (the host runs on) and compares each batch with an
unstalled run of the same lane: exact equality. The control repeats the stalled run with the
wait removed and says whether it corrupted a batch or that the hazard did not appear.

Tolerance: nvJPEG's hardware path does not use libjpeg-turbo's fancy upsampling, so on 4:2:x
JPEGs a GPU engine differs from the CPU lane by more than rounding (a CPU proxy gives a mean of
0.23 grey levels on 4:2:0, 0.77 on the worst image). A difference the size of rounding or
upsampling is never a fault (above the documented bound the docs must state the measured
figure); only a gross one (a wrong box, flip or batch) fails.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.cli.demo_data import make_photo_folder
from hybridload.lanes._base import BatchTask, LaneKind
from hybridload.lanes._build import build_lanes, close_lanes
from hybridload.lanes._gpu import torch_lane as torch_lane_module

#: the reason every GPU test gives on a machine without CUDA
NO_CUDA = (
    f"needs a CUDA device: torch {torch.__version__} (CUDA build {torch.version.cuda}) sees none; "
    "the GPU machine runs these with tools/gpu_check/gpu_check.py"
)

#: DALI cannot travel to the GPU machine (788 MB installed against 64 MiB carried)
DALI_ABSENT = (
    "DALI is not installed here (it cannot be carried to the GPU machine: 788 MB against 64 MiB); "
    "the DALI engine is verified in its CPU-only mode only (tests/test_dali_lane.py)"
)


def dali_missing() -> str | None:
    """Why the DALI engine cannot be tested here, or None."""
    try:
        import nvidia.dali  # noqa: F401
    except Exception:
        return DALI_ABSENT
    return None


# -- the fixtures: each test module imports those it uses (``*_fixture``; pytest finds them by
# their ``name``). The folder has no conftest, so it runs the same inside the suite and copied
# to the GPU machine.


@pytest.fixture(scope="session", name="cuda")
def cuda_fixture():
    """This process's CUDA device."""
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="session", name="gpu_photos")
def gpu_photos_fixture(tmp_path_factory):
    """An ImageFolder of 256 photo JPEGs (crops of real photographs) in 8 classes (made once:
    each module that imports the fixture has its own, and they share the folder)."""
    root = make_photo_folder(tmp_path_factory.getbasetemp() / "gpu-photos", 256, num_classes=8, seed=0)
    return sources.ImageFolder(str(root))


@pytest.fixture(scope="session", name="rec224")
def rec224_fixture():
    """The ImageNet training recipe at 224, uint8 out (the lanes' delivery form)."""
    return recipe.imagenet_train(224)


class NoGpuLane(RuntimeError):
    """The lane spec built no GPU lane (the engine is unavailable here): the message says why."""


def spec_gpu_lane(src, rec, bs: int, device, engine: str = "torch"):
    """The GPU lane of ``engine`` built as the loader builds it: ``LoaderPolicy.lane_spec`` then
    ``build_lanes`` (uint8 out, no host wait per batch); the stand-by CPU lane is closed."""
    spec = LoaderPolicy(mode="gpu", gpu_engine=engine, cpu_actors=0, threads=2).lane_spec(device=device, recipe=rec)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        built = build_lanes(spec, src, rec, batch_size=bs, device=torch.device(device), pin_memory=False)
    gpu = [lane for lane in built.lanes if lane.kind is LaneKind.GPU]
    close_lanes([lane for lane in built.lanes if lane.kind is not LaneKind.GPU])
    if not gpu:
        raise NoGpuLane("; ".join(str(w.message) for w in said) or f"the lane spec built no {engine} GPU lane")
    return gpu[0]


def host_images(result) -> torch.Tensor:
    """A lane result's images on the host, after its ``ready`` event (a lane built as the loader
    builds it does not wait for its own work: its pixels are final only once the event has run)."""
    ready = getattr(result, "ready", None)
    if ready is not None:
        ready.synchronize()
    return result.images.cpu()


def tasks(n_images: int, bs: int, batches: int) -> list[BatchTask]:
    return [BatchTask(k, 0, np.arange(k * bs, (k + 1) * bs) % n_images) for k in range(batches)]


# -- ordering under a stalled stream

SLEEP_CYCLES = 20_000_000  # about 10 ms of spinning per batch on an H100


@contextlib.contextmanager
def without_the_wait():
    """The torch engine with its wait before each decode removed (the control)."""
    real = torch_lane_module.wait_until_idle
    torch_lane_module.wait_until_idle = lambda stream: None
    try:
        yield
    finally:
        torch_lane_module.wait_until_idle = real


def cuda_stall(lane, cycles: int = SLEEP_CYCLES):
    """Hold each batch's ops up on the lane's stream (queued ahead of them; the host does not wait)."""
    real = lane._augment

    def stalled(task, batch, decoded):
        torch.cuda._sleep(cycles)
        return real(task, batch, decoded)

    lane._augment = stalled


def _run(make_lane, work, stall, sync) -> list[torch.Tensor]:
    lane = make_lane()
    try:
        if stall is not None:
            stall(lane)
        results = [lane.run_batch(t) for t in work]  # no host wait between batches
        sync(lane)
        return [r.images.cpu().clone() for r in results]
    finally:
        lane.close()


def _differing(a: list[torch.Tensor], b: list[torch.Tensor]) -> list[int]:
    return [k for k, (x, y) in enumerate(zip(a, b)) if x.shape != y.shape or not torch.equal(x, y)]


def stalled_ordering(
    make_lane, n_images: int, bs: int, *, stall, sync, unguarded=without_the_wait, batches: int = 8, tries: int = 3
) -> dict:
    """A stalled run of the lane against an unstalled one, batch for batch; and the control."""
    work = tasks(n_images, bs, batches)
    reference = _run(make_lane, work, None, sync)
    bad = _differing(reference, _run(make_lane, work, stall, sync))
    control, corrupted_at = f"hazard not seen in {tries} tries", None
    for attempt in range(1, tries + 1):
        with unguarded():
            wrong = _differing(reference, _run(make_lane, work, stall, sync))
        if wrong:
            control, corrupted_at = f"corrupting: {len(wrong)} of {batches} batches differ (try {attempt})", attempt
            break
    return {
        "batches": batches,
        "equal_batches": batches - len(bad),
        "differing_batches": bad,
        "control": control,
        "control_corrupted_on_try": corrupted_at,
    }


# -- pixel tolerance per chroma subsampling

#: docs/guide: a GPU engine's mean absolute difference from the CPU lane stays under this
DOCUMENTED_MEAN = 0.5
#: differences no decoder rounding or chroma upsampling makes: a wrong crop box, flip or batch
GROSS_MEAN, GROSS_P99 = 2.0, 24
SUBSAMPLINGS = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2, "grey": None}  # Pillow's ``subsampling`` codes


def subsampled_folders(src, root: Path, n: int) -> dict[str, str]:
    """The first ``n`` images of ``src`` re-encoded (quality 90) at each chroma subsampling and
    in greyscale: {name: ImageFolder root}."""
    out = {}
    for name, code in SUBSAMPLINGS.items():
        d = Path(root) / f"sub{name.replace(':', '')}" / "class_000"
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
    from hybridload.lanes._cpu_job import process_batch

    lane = make_lane(src, rec, bs)
    hist = np.zeros(256, np.int64)
    try:
        for task in tasks(len(src), bs, max(1, len(src) // bs)):
            got = host_images(lane.run_batch(task))
            want = process_batch(src, rec, task.indices, 0, 0).images
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


def quiet_loader(src, rec, bs, device, **policy) -> HybridLoader:
    """A HybridLoader over ``src`` returning indices, seed 0, no Ray actors, 2 threads, the
    policy's other knobs as given; its construction warnings silenced (the lanes it picks here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return HybridLoader(
            src,
            rec,
            bs,
            device=device,
            seed=0,
            return_indices=True,
            policy=LoaderPolicy(**{"cpu_actors": 0, "threads": 2, **policy}),
        )
