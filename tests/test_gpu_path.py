"""The GPU path on a CPU box: device resolution, engine choice and fallback, stream-event
ordering, Reroute vs lane failure, EXIF handling, the CPU-only warning, and the torch
engine's pixels (its ops on CPU tensors with a CPU decoder) against the CPU lane.

CUDA itself is faked only where the logic is about CUDA objects (which device, which
event a stream waits on); everything else runs for real.
"""

from __future__ import annotations

import contextlib
import io
import sys
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload._kernels import decode_image
from hybridload.lanes._cpu_job import process_batch
from hybridload.lanes import _once as once
from hybridload.lanes._base import BatchTask, LaneKind, Reroute
from hybridload.lanes._gpu import dali as dali_mod
from hybridload.lanes._gpu import make_gpu_lane
from hybridload.lanes._gpu import torch_decoders as torch_decoders_mod
from hybridload.lanes._gpu.failures import is_device_failure, is_sample_decode_problem
from hybridload.lanes._gpu.torch_lane import TorchGpuLane
from hybridload.delivery._finish import normalize_batch as normalize
from hybridload._torchops.ops import as_op
from hybridload.delivery._finish import normalize_batch
from hybridload.recipe._ops import Crop, Flip, Resize
from hybridload.delivery._transfer import DeviceMover, resolve_device, wait_for

# Stated tolerance, torch engine against the CPU lane (same boxes and flips; the engine
# resizes in float32 and rounds, the CPU kernel in torch's uint8 fixed point): measured on
# the photo set, mean |diff| 0.07-0.10 grey levels per batch, max 1, none off by > 2.
TORCH_MEAN_TOL = 0.2
TORCH_MAX_TOL = 1


def cpu_decode(datas):
    """The torch engine's decoder contract served by the CPU kernels (torchvision does not load here)."""
    return [torch.from_numpy(decode_image(d.numpy().tobytes())).permute(2, 0, 1) for d in datas]


class FakeCuda:
    """Stands in for torch.cuda: devices, streams and events that record what waited on what."""

    def __init__(self, count=4, current=2):
        self.count, self.current, self.log = count, current, []
        fake = self

        class Stream:
            def __init__(self, device=None):
                self.device = device

            def wait_event(self, event):
                fake.log.append(("wait_event", self, event))

            def wait_stream(self, other):
                fake.log.append(("wait_stream", self, other))

            def synchronize(self):
                fake.log.append(("stream_idle", self))

        class Event:
            def record(self, stream=None):
                self.stream = stream
                fake.log.append(("record", stream, self))

            def synchronize(self):
                fake.log.append(("host_wait", self))

        self.Stream, self.Event = Stream, Event
        self.current_s = Stream("current")

    def is_available(self):
        return True

    def device_count(self):
        return self.count

    def current_device(self):
        return self.current

    def current_stream(self, device=None):
        return self.current_s

    def stream(self, s):
        return contextlib.nullcontext()


# ------------------------------------------------------------------ fix 1: which device
@pytest.mark.parametrize(
    "device,env,want",
    [
        ("cuda", {}, "cuda:2"),  # no index: the current device, not GPU 0
        ("cuda", {"LOCAL_RANK": "3"}, "cuda:2"),  # an explicit "cuda" follows set_device, as torch does
        (None, {}, "cuda:2"),  # no LOCAL_RANK: the current device
        (None, {"LOCAL_RANK": "5"}, "cuda:1"),  # a launcher's LOCAL_RANK, modulo the visible GPUs
        ("cuda:3", {}, "cuda:3"),
        ("cpu", {}, "cpu"),
    ],
)
def test_cuda_without_an_index_means_the_current_device(device, env, want):
    assert resolve_device(device, env=env, cuda=FakeCuda()) == torch.device(want)


def test_no_cuda_means_cpu():
    class NoCuda(FakeCuda):
        def is_available(self):
            return False

    assert resolve_device(None, env={"LOCAL_RANK": "1"}, cuda=NoCuda()) == torch.device("cpu")


def test_dali_device_id_is_the_resolved_device(photo_root, monkeypatch):
    import hybridload._pipelines as pipelines

    fake = FakeCuda(current=3)
    for name in ("current_device", "device_count", "is_available", "Stream"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    seen = {}
    monkeypatch.setattr(pipelines, "build_pipeline", lambda rec, **kw: seen.update(kw) or object())
    lane = dali_mod.DaliLane(sources.ImageFolder(photo_root), recipe.imagenet_train(32), batch_size=4, device="cuda")
    assert seen["device_id"] == 3 and lane.describe() == "GPU lane: DALI on cuda:3" and lane.kind is LaneKind.GPU
    lane._pool.shutdown()


# ------------------------------------------------------------------ fix 2: build failures fall back
def test_a_dali_pipeline_that_fails_to_build_falls_back_to_the_cpu_lane_with_a_warning(photo_root, monkeypatch):
    import hybridload._pipelines as pipelines

    def broken(rec, **kw):
        raise RuntimeError("nvJPEG initialization failed: CUDA driver version is insufficient")

    monkeypatch.setattr(pipelines, "build_pipeline", broken)
    monkeypatch.setattr(once, "_said", set())  # as in a fresh process: the warning comes
    src = sources.ImageFolder(photo_root)
    with pytest.warns(RuntimeWarning, match="GPU lane is unavailable.*could not build.*CPU lanes"):
        assert (
            make_gpu_lane(
                LoaderPolicy(gpu_engine="dali").lane_spec(), src, recipe.imagenet_train(32), batch_size=4, device="cpu"
            )
            is None
        )
    rec = recipe.imagenet_train(32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with HybridLoader(
            src,
            rec,
            8,
            policy=LoaderPolicy(mode="split", gpu_share=0.5, gpu_engine="dali", cpu_actors=0),
            seed=1,
            return_indices=True,
        ) as ld:
            got = [idx.tolist() for _i, _l, idx in ld]
            assert list(ld.stats()["lanes"]) == ["inprocess"]
    assert got == [b.tolist() for b in ld.batch_indices(0)]


def test_the_torch_engine_without_torchvision_falls_back_with_a_warning(photo_root, monkeypatch):
    def missing(device):
        raise torch_decoders_mod.LaneUnavailableError("the torch GPU engine needs torchvision")

    monkeypatch.setattr(torch_decoders_mod, "MAKERS", {"torchcodec": missing, "torchvision": missing})
    with pytest.warns(
        RuntimeWarning,
        match="torch: no JPEG decoder works .*torchvision: LaneUnavailableError: "
        "the torch GPU engine needs torchvision",
    ):
        assert (
            make_gpu_lane(
                LoaderPolicy(gpu_engine="torch").lane_spec(),
                sources.ImageFolder(photo_root),
                recipe.imagenet_train(32),
                batch_size=4,
                device="cpu",
            )
            is None
        )


# ------------------------------------------------------------------ fix 4: stream safety
def test_the_consumer_stream_waits_on_the_lanes_event_before_the_batch_is_handed_over(photo_root, monkeypatch):
    fake = FakeCuda(current=0)
    monkeypatch.setattr(torch.cuda, "Stream", fake.Stream)
    monkeypatch.setattr(torch.cuda, "Event", fake.Event)
    monkeypatch.setattr(torch.cuda, "stream", fake.stream)
    lane = TorchGpuLane(
        sources.ImageFolder(photo_root),
        recipe.imagenet_train(32),
        batch_size=4,
        device=torch.device("cuda", 0),
        decode=cpu_decode,
    )
    result = lane.run_batch(BatchTask(0, 0, np.arange(4)))
    lane.close()
    assert result.ready is not None and result.ready.stream is not fake.current_s  # recorded on the lane's stream

    class Mover(DeviceMover):
        def _move(self, t):
            return t

    class Tracked:
        def __init__(self, t):
            self.t = t

        def record_stream(self, s):
            fake.log.append(("record_stream", s, self))

    mover = Mover(torch.device("cuda", 0), cuda=fake)
    fake.log.clear()
    mover(Tracked(result.images), ready=result.ready)
    assert fake.log[0] == ("wait_event", fake.current_s, result.ready)  # before anything reads the pixels
    assert [e[0] for e in fake.log] == ["wait_event", "wait_stream", "record_stream"]


def test_wait_for_nothing_is_a_no_op_and_cpu_delivery_copies_nothing():
    class Loud:
        def wait_event(self, e):
            raise AssertionError("waited")

    wait_for(None, Loud())
    images = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)

    class Result:
        labels, indices, ready = np.array([1, 2]), np.array([5, 6]), None

    Result.images = images
    out = DeviceMover(torch.device("cpu")).deliver(Result(), with_indices=True)
    assert out[0] is images and out[2].tolist() == [5, 6]


def test_normalize_on_the_device_equals_the_cpu_kernels_arithmetic():
    rec = recipe.imagenet_eval(16, normalize=True)
    batch = torch.randint(0, 256, (3, 3, 16, 16), dtype=torch.uint8)
    assert torch.equal(normalize(batch, rec), normalize_batch(batch, rec))
    assert torch.equal(normalize(batch, rec), normalize(batch, rec))  # cached scale/bias, same result


# ------------------------------------------------------------------ fix 6: Reroute vs lane failure
@pytest.mark.parametrize(
    "exc,sample",
    [
        (RuntimeError("[/opt/dali/...] Error in MIXED operator nvidia.dali.fn.decoders.image: nvJPEG failed"), True),
        (RuntimeError("Error while decoding JPEG images"), True),
        (ValueError("Unsupported image format"), True),
        (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), False),
        (RuntimeError("decoders.image: CUDA error: an illegal memory access was encountered"), False),
        (RuntimeError("Can't allocate 1024 bytes on device 0: cudaMalloc failed"), False),
        (KeyError("bug"), False),
    ],
)
def test_only_a_samples_decode_problem_is_rerouted(exc, sample):
    assert is_sample_decode_problem(exc) is sample
    if not sample and not isinstance(exc, KeyError):
        assert is_device_failure(exc)


def test_cuda_oom_in_the_dali_lane_is_a_lane_failure_not_a_reroute(photo_root):
    lane = dali_mod.DaliLane(sources.ImageFolder(photo_root), recipe.imagenet_train(32), batch_size=4, device="cpu")
    oom = torch.cuda.OutOfMemoryError("CUDA out of memory")

    def run():
        raise oom

    lane._pipe.run = run
    with pytest.raises(torch.cuda.OutOfMemoryError):
        lane.run_batch(BatchTask(0, 0, np.arange(4)))
    lane._pipe.run = lambda: (_ for _ in ()).throw(RuntimeError("Error in CPU operator decoders.image: bad"))
    with pytest.raises(Reroute):
        lane.run_batch(BatchTask(1, 0, np.arange(4)))
    lane.close()


@pytest.mark.parametrize(
    "exc,want",
    [(RuntimeError("CUDA out of memory"), RuntimeError), (RuntimeError("Error while decoding JPEG images"), Reroute)],
)
def test_torch_engine_reroutes_decode_problems_and_raises_the_rest(photo_root, exc, want):
    def decode(datas):
        raise exc

    lane = TorchGpuLane(
        sources.ImageFolder(photo_root),
        recipe.imagenet_train(32),
        batch_size=4,
        device=torch.device("cpu"),
        decode=decode,
    )
    with pytest.raises(want) as info:
        lane.run_batch(BatchTask(0, 0, np.arange(4)))
    assert (info.type is Reroute) == (want is Reroute)
    lane.close()


# ------------------------------------------------------------------ fix 5: EXIF orientation ignored everywhere
@pytest.fixture(scope="module")
def exif_source(tmp_path_factory):
    root = tmp_path_factory.mktemp("exif") / "c"
    root.mkdir()
    y, x = np.mgrid[0:48, 0:80]
    arr = np.stack([x * 3, y * 5, (x + y) * 2], axis=2).astype(np.uint8)  # no symmetry: a rotation shows
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    for k in range(4):
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, format="JPEG", quality=95, exif=exif.tobytes())
        (root / f"{k}.jpg").write_bytes(buf.getvalue())
    return sources.ImageFolder(str(root.parent))


def test_exif_orientation_is_ignored_by_the_cpu_lane_dali_and_the_torch_engine(exif_source, monkeypatch):
    payload, _ = exif_source.read(exif_source.ref(0))
    assert Image.open(io.BytesIO(payload)).getexif()[0x0112] == 6
    assert decode_image(payload).shape == (48, 80, 3)  # stored orientation, not rotated
    rec = recipe.Recipe([recipe.Decode(), recipe.Resize((24, 40))])
    idx = np.arange(4)
    cpu = process_batch(exif_source, rec, idx, 0, 0).images
    monkeypatch.setattr(once, "_said", set())  # as in a fresh process: the warning comes
    with pytest.warns(RuntimeWarning, match="CPU-only mode"):
        dali = dali_mod.DaliLane(exif_source, rec, batch_size=4, device="cpu")
    dali_imgs = dali.run_batch(BatchTask(0, 0, idx)).images
    dali.close()
    torch_imgs = (
        TorchGpuLane(exif_source, rec, batch_size=4, device=torch.device("cpu"), decode=cpu_decode)
        .run_batch(BatchTask(0, 0, idx))
        .images
    )
    for got in (dali_imgs, torch_imgs):
        assert got.shape == cpu.shape
        assert (got.int() - cpu.int()).abs().float().mean() < 1.0  # a rotated decode differs by tens


# ------------------------------------------------------------------ fix 9: one loud warning
def test_dali_cpu_only_mode_warns_once_per_process(photo_root, monkeypatch):
    monkeypatch.setattr(once, "_said", set())
    src, rec = sources.ImageFolder(photo_root), recipe.imagenet_train(32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = LoaderPolicy().lane_spec(device="cpu")
        lanes = [make_gpu_lane(spec, src, rec, batch_size=4, device="cpu") for _ in range(2)]
    loud = [w for w in caught if "CPU-only mode (no GPU visible)" in str(w.message)]
    assert len(loud) == 1 and all(lane.describe() == "GPU lane: DALI CPU-only mode, no GPU visible" for lane in lanes)
    for lane in lanes:
        lane.close()


# ------------------------------------------------------------------ the torch engine's pixels and stream
def test_as_op_takes_tuples_and_typed_ops_alike():
    assert [as_op(o) for o in (("crop", 1, 2, 3, 4), ("resize", 5, 6), ("flip",))] == [
        Crop(1, 2, 3, 4),
        Resize(5, 6),
        Flip(),
    ]
    assert as_op(Resize(2, 3)) == Resize(2, 3)
    with pytest.raises(ValueError, match="unknown operation"):
        as_op(("rotate", 9))


@pytest.mark.parametrize(
    "rec", [recipe.imagenet_train(64), recipe.imagenet_eval(48, normalize=True)], ids=["train", "eval-normalized"]
)
def test_torch_engine_index_stream_equals_cpu_lane_and_pixels_within_tolerance(photo_root, monkeypatch, rec):
    monkeypatch.setattr(torch_decoders_mod, "gpu_decoder", lambda device: cpu_decode)
    src = sources.ImageFolder(photo_root)

    def run(policy):
        with HybridLoader(src, rec, 6, policy=policy, seed=7, return_indices=True) as ld:
            out = []
            for e in (0, 1):
                ld.set_epoch(e)
                out += [(idx.tolist(), lab.tolist(), img) for img, lab, idx in ld]
            return out, ld.stats()

    cpu, _ = run(LoaderPolicy(mode="cpu", cpu_actors=0, threads=2))
    gpu, stats = run(LoaderPolicy(mode="gpu", gpu_engine="torch", cpu_actors=0, threads=1))
    assert stats["lanes"]["gpu"]["share"] == 1.0
    assert [(i, lab) for i, lab, _ in gpu] == [(i, lab) for i, lab, _ in cpu]
    scale = 1.0 if rec.normalize is None else 255 * min(rec.normalize.std)
    for (_, _, a), (_, _, b) in zip(gpu, cpu):
        d = (a.float() - b.float()).abs() * scale
        assert d.mean() <= TORCH_MEAN_TOL and d.max() <= TORCH_MAX_TOL + 1e-3


@pytest.mark.parametrize("dali", ["installed", "unimportable"])
def test_split_on_a_cpu_machine_warns_once_in_one_short_line_true_for_this_venv(photo_root, dali, monkeypatch):
    """The quickstart's mode="split" on a machine with no GPU, its loader made twice: one warning
    of at most 200 characters; DALI's CPU-only stand-in where DALI is installed, and where it is
    not, a warning that says so (no install lines for a GPU stack this machine cannot use)."""
    monkeypatch.setattr(once, "_said", set())  # as in a fresh process
    if dali == "unimportable":
        monkeypatch.setitem(sys.modules, "nvidia.dali", None)
    policy = LoaderPolicy(mode="split", gpu_share=0.5, cpu_actors=0, threads=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with HybridLoader(sources.ImageFolder(photo_root), recipe.imagenet_train(32), 4, policy=policy) as ld:
                next(iter(ld))
    said = [str(w.message) for w in caught if "GPU" in str(w.message) or "DALI" in str(w.message)]
    assert len(said) == 1 and len(said[0]) <= 200, said
    if dali == "installed":
        assert "DALI's CPU-only mode" in said[0] and "stand-in" in said[0], said[0]
    else:
        assert "DALI" in said[0] and "not installed" in said[0] and "pip install" not in said[0], said[0]
