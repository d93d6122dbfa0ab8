"""Device faults are not bad images: the GPU lanes' failure classification, table-tested on the
messages the decoders really produce (no GPU here, so these are recorded strings):

* torchvision's batched CUDA decoder, ``torchvision/csrc/io/image/cuda/decode_jpegs_cuda.cpp``
  (``TORCH_CHECK(status == NVJPEG_STATUS_SUCCESS, "Failed to <step>: ", status)``), as
  ``RuntimeError``; a non-``runtime_error`` from it arrives wrapped as
  ``"Error while decoding JPEG images: <message>"``;
* torchcodec's batched CUDA decoder, ``src/torchcodec/_core/DecodeJpegCuda.cpp`` (meta-pytorch/torchcodec
  at 78ed5ad: ``STD_TORCH_CHECK(..., "Failed to <step>: ", status)`` at lines 212-241, 279, 404,
  417, 428, 481, and ``"nvjpegDecode failed: "`` at line 454, its per-image software path) and
  ``ImageCommon.h`` (``"Input tensor must be 1-dimensional and non-empty"``);
* DALI's nvJPEG decoder, ``dali/operators/decoder/nvjpeg/nvjpeg_helper.h`` (``NVJPEG error "<status>"``);
* DALI 2.4.0's nvImageCodec decoders, recorded on this machine in DALI's CPU-only mode:
  a truncated JPEG gives ``Failed to decode sample #0``, a text file ``nvImageCodec failure: '#4'``;
  the status numbers are ``nvimgcodecStatus_t`` (``nvimgcodec.h``).

A device fault must count against the lane (so the lane breaks after ``break_after`` failures
and the CPU lanes finish the stream); an image's problem must be rerouted to a CPU lane.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hybridload import recipe, sources
from hybridload.lanes._base import BatchTask, Reroute
from hybridload.lanes._gpu.failures import DEVICE, IMAGE, OTHER, classify, is_sample_decode_problem
from hybridload.lanes._gpu.torch_lane import TorchGpuLane

WRAP = "Error while decoding JPEG images: "
TORCHVISION = [
    # the image's: a header step, or a decode step with an image status
    ("Failed to get image info: 3", IMAGE),  # NVJPEG_STATUS_BAD_JPEG
    ("Failed to get image info: 2", IMAGE),  # INVALID_PARAMETER on one image's header
    ("Failed to parse jpeg stream: 4", IMAGE),  # JPEG_NOT_SUPPORTED
    ("Unknown chroma subsampling", IMAGE),
    ("Expected a non empty 1-dimensional tensor", IMAGE),
    ("Failed to decode batch: 3", IMAGE),
    ("Failed to decode jpeg stream: 10", IMAGE),  # INCOMPLETE_BITSTREAM
    (WRAP + "Failed to decode batch: 9", IMAGE),  # IMPLEMENTATION_NOT_SUPPORTED
    # the device's
    ("Failed to decode batch: 5", DEVICE),  # ALLOCATOR_FAILURE
    (WRAP + "Failed to decode batch: 5", DEVICE),
    ("Failed to decode jpeg stream: 6", DEVICE),  # EXECUTION_FAILED
    ("Failed to decode batch: 8", DEVICE),  # INTERNAL_ERROR
    ("Failed to get image info: 1", DEVICE),  # NOT_INITIALIZED, even on a header step
    ("Failed to synchronize CUDA stream: 700", DEVICE),  # cudaErrorIllegalAddress
    ("Failed to synchronize CUDA stream: 2", DEVICE),  # cudaErrorMemoryAllocation
    ("Failed to initialize nvjpeg with hardware backend: 5", DEVICE),
    ("Failed to initialize nvjpeg with default backend: 7", DEVICE),
    ("Failed to create nvjpeg decoder: 1", DEVICE),
    ("Failed to create pinned buffer: 5", DEVICE),
    ("Failed to attach device buffer: 5", DEVICE),
    ("Failed to initialize batch decoding: 6", DEVICE),
    ("Failed to transfer jpeg to device: 6", DEVICE),
    ("nvjpegGetProperty failed: 8", DEVICE),
    ("decode_jpegs_cuda: torchvision not compiled with nvJPEG support", DEVICE),
]
TORCHCODEC = [
    ("nvjpegDecode failed: 3", IMAGE),  # BAD_JPEG on the software path (progressive)
    ("nvjpegDecode failed: 10", IMAGE),  # INCOMPLETE_BITSTREAM
    ("nvjpegDecode failed: 5", DEVICE),  # ALLOCATOR_FAILURE
    ("nvjpegDecode failed: 6", DEVICE),  # EXECUTION_FAILED
    ("Failed to get image info: 3", IMAGE),
    ("Failed to decode batch: 4", IMAGE),
    ("Failed to decode batch: 8", DEVICE),
    ("Failed to initialize batch decoding: 5", DEVICE),
    ("Failed to create nvjpeg state: 1", DEVICE),
    ("Failed to create jpeg stream: 5", DEVICE),
    ("Failed to create nvjpeg decode state: 5", DEVICE),
    ("Failed to synchronize CUDA stream: 700", DEVICE),
    (
        "decode_jpeg: torchcodec was not compiled with nvJPEG support, so JPEG images cannot be decoded on a "
        "CUDA device.",
        DEVICE,
    ),
    ("Input tensor must be 1-dimensional and non-empty, got 1 dims  and 0 numels.", IMAGE),
]
DALI = [
    ('[/opt/dali/dali/operators/decoder/nvjpeg/nvjpeg_decoder.h:512] NVJPEG error "3" img_017.jpg', IMAGE),
    ('NVJPEG error "4" img_017.jpg', IMAGE),
    ('NVJPEG error "5"', DEVICE),
    ('NVJPEG error "6" img_017.jpg', DEVICE),
    (
        "Error in CPU operator `nvidia.dali.fn.decoders.image`, which was used in the pipeline definition "
        "with the following traceback: ... encountered: Failed to decode sample #0 : ",
        IMAGE,
    ),  # recorded here
    ("Error in CPU operator `nvidia.dali.fn.decoders.image`, ... encountered: nvImageCodec failure: '#4'", IMAGE),
    ("Error in MIXED operator `nvidia.dali.fn.decoders.image_slice` ... nvImageCodec failure: '#3'", IMAGE),
    ("Error in MIXED operator `nvidia.dali.fn.decoders.image` ... nvImageCodec failure: '#5'", DEVICE),
    ("Error in MIXED operator `nvidia.dali.fn.decoders.image` ... nvImageCodec failure: '#21'", DEVICE),
    (
        "Error in MIXED operator `nvidia.dali.fn.decoders.image` ... CUDA runtime API error "
        "cudaErrorIllegalAddress (700): an illegal memory access was encountered",
        DEVICE,
    ),
    ("[/opt/dali/...] Error in MIXED operator nvidia.dali.fn.decoders.image: nvJPEG failed", IMAGE),
    ("Can't allocate 1024 bytes on device 0: cudaMalloc failed", DEVICE),
]


ALL = TORCHVISION + TORCHCODEC + DALI


@pytest.mark.parametrize("message, verdict", ALL, ids=[m[:60] for m, _ in ALL])
def test_each_recorded_decoder_message_is_classified_as_upstream_means_it(message, verdict):
    assert classify(RuntimeError(message)) == verdict
    assert is_sample_decode_problem(RuntimeError(message)) is (verdict == IMAGE)


def test_out_of_memory_is_the_device_and_a_bug_is_neither():
    assert classify(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")) == DEVICE
    assert classify(KeyError("bug")) == OTHER
    assert not is_sample_decode_problem(KeyError("decoders."))  # only decode errors (RuntimeError, ValueError)


@pytest.mark.parametrize(
    "message, rerouted",
    [
        ("Failed to decode batch: 3", True),
        ("Failed to decode batch: 5", False),
        ("Failed to synchronize CUDA stream: 700", False),
    ],
)
def test_the_torch_engine_reroutes_a_bad_image_and_raises_a_device_fault(photo_root, message, rerouted):
    """A device fault leaves run_batch as it was raised, so the dispatcher counts it against
    the lane (and breaks it after ``break_after``); a bad image leaves as Reroute."""

    def decode(datas):
        raise RuntimeError(message)

    lane = TorchGpuLane(
        sources.ImageFolder(photo_root),
        recipe.imagenet_train(32),
        batch_size=4,
        device=torch.device("cpu"),
        decode=decode,
    )
    try:
        with pytest.raises(Reroute if rerouted else RuntimeError) as info:
            lane.run_batch(BatchTask(0, 0, np.arange(4)))
        assert (info.type is Reroute) is rerouted
    finally:
        lane.close()


def test_a_device_fault_breaks_the_gpu_lane_and_the_cpu_lane_finishes_the_stream(photo_root, monkeypatch):
    """Before this classification, DALI's ``NVJPEG error "6"`` (EXECUTION_FAILED) read as a bad
    image: every batch was rerouted and the lane never broke. Now it counts against the lane."""
    from hybridload import HybridLoader, LoaderPolicy
    from hybridload.lanes._gpu.dali import DaliLane
    from hybridload.lanes._gpu.failures import rerouting

    src, rec = sources.ImageFolder(photo_root), recipe.imagenet_train(32)

    def stream(policy):
        with HybridLoader(src, rec, 6, policy=policy, seed=7, return_indices=True, device="cpu") as ld:
            got = [(idx.tolist(), lab.tolist()) for _img, lab, idx in ld]
            return got, ld.stats()

    want, _ = stream(LoaderPolicy(mode="cpu", cpu_actors=0))
    calls, real = {"n": 0}, DaliLane._decode

    def faulty(self, task, batch):
        calls["n"] += 1
        if calls["n"] > 2:
            with rerouting(f"DALI on batch {task.seq}"):
                raise RuntimeError('Error in MIXED operator `nvidia.dali.fn.decoders.image` NVJPEG error "6"')
        return real(self, task, batch)

    monkeypatch.setattr(DaliLane, "_decode", faulty)
    got, stats = stream(LoaderPolicy(mode="gpu", gpu_engine="dali", cpu_actors=0, break_after=2))
    assert got == want  # every batch, in order, once
    assert stats["lanes"]["gpu"]["batches"] == 2  # the lane broke after its faults
    assert calls["n"] < len(want)  # not handed every batch (as when each was rerouted)
    assert calls["n"] <= 2 + 2 + 2  # two good, two faults to break, two already in flight


def test_the_torch_engine_waits_for_its_stream_to_be_idle_before_each_decode(photo_root):
    """The ordering logic on a fake stream (no CUDA here): before every batched decode — which
    torchvision runs on a private stream that does not wait for the lane's — the lane's stream
    is synchronised, so no kernel of the previous batch can still read memory the decode is
    about to reuse. On a GPU, ``tests/gpu/test_cuda_ordering.py`` stalls the stream and compares
    the pixels with an unstalled run."""
    from hybridload._kernels.decode import decode_image

    events = []

    class FakeStream:
        def synchronize(self):
            events.append("idle")

    def decode(datas):
        events.append("decode")
        return [torch.from_numpy(decode_image(bytes(d.numpy()))).permute(2, 0, 1) for d in datas]

    lane = TorchGpuLane(
        sources.ImageFolder(photo_root),
        recipe.imagenet_train(32),
        batch_size=4,
        device=torch.device("cpu"),
        decode=decode,
    )
    lane._stream = FakeStream()
    try:
        for seq in range(3):
            lane.run_batch(BatchTask(seq, 0, np.arange(4 * seq, 4 * seq + 4)))
    finally:
        lane.close()
    assert events == ["idle", "decode"] * 3


def test_the_dali_lane_copies_a_batch_out_before_its_pipeline_runs_again(photo_root):
    """DALI reuses its output buffers on the next run(): on a fake stream (CPU-only DALI here)
    every run is preceded by waiting for the lane's stream (where the copy of the last output
    was queued), and each batch's images stay what they were after later batches ran."""
    import warnings
    from hybridload.lanes._gpu.dali import DaliLane

    events = []

    class FakeStream:
        def synchronize(self):
            events.append("idle")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lane = DaliLane(sources.ImageFolder(photo_root), recipe.imagenet_train(32), batch_size=4, device="cpu")
    real_run = lane._pipe.run

    def run():
        events.append("run")
        return real_run()

    lane._pipe.run, lane._stream = run, FakeStream()
    try:
        first = lane.run_batch(BatchTask(0, 0, np.arange(4))).images
        kept = first.clone()
        for seq in (1, 2):
            lane.run_batch(BatchTask(seq, 0, np.arange(4 * seq, 4 * seq + 4)))
    finally:
        lane.close()
    assert events == ["idle", "run"] * 3
    assert torch.equal(first, kept)


def test_the_torchvision_decoder_is_always_asked_for_the_same_indexed_device(monkeypatch):
    """torchvision rebuilds its process-wide nvJPEG decoder whenever the device differs from the
    last call's ("cuda" != "cuda:1"): a fake torchvision.io records what every call names."""
    import sys
    import types
    from hybridload.lanes._gpu.torch_lane import torchvision_decoder

    seen = []
    fake_io = types.ModuleType("torchvision.io")
    fake_io.ImageReadMode = types.SimpleNamespace(RGB="RGB")
    fake_io.decode_jpeg = lambda datas, mode, device, apply_exif_orientation: seen.append(device) or []
    monkeypatch.setitem(sys.modules, "torchvision", types.ModuleType("torchvision"))
    monkeypatch.setitem(sys.modules, "torchvision.io", fake_io)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    decode = torchvision_decoder(torch.device("cuda"))
    for _ in range(3):
        decode([torch.zeros(4, dtype=torch.uint8)])
    assert seen == [torch.device("cuda", 1)] * 3


# -- DALI's causeless "Failed to decode sample #k": the CPU kernels settle whose fault it is

AMBIGUOUS = (
    "Error in MIXED operator `nvidia.dali.fn.decoders.image_slice` ... encountered: Failed to decode sample #1 : "
)


def _payloads(photo_root, n=3):
    src = sources.ImageFolder(photo_root)
    return [src.read(src.ref(i))[0] for i in range(n)]


def test_a_sample_the_gpu_fails_and_the_cpu_decodes_is_a_device_fault(photo_root):
    from hybridload.lanes._gpu.failures import DeviceDecodeFault, confirm_on_cpu

    payloads = _payloads(photo_root)
    with pytest.raises(DeviceDecodeFault, match=r"sample\(s\) \[1\] of the batch, which the CPU decodes"):
        confirm_on_cpu(RuntimeError(AMBIGUOUS), payloads, "DALI on batch 0")
    assert not issubclass(DeviceDecodeFault, Reroute)  # a lane failure, counted against the lane


def test_a_sample_the_cpu_cannot_decode_either_is_rerouted_to_be_named(photo_root):
    from hybridload.lanes._gpu.failures import confirm_on_cpu

    payloads = _payloads(photo_root)
    payloads[1] = payloads[1][:200] + b"\xff\xd9"  # cut short, end marker kept: the CPU decoder refuses it
    with pytest.raises(Reroute, match="sample #1 of the batch fails on the CPU too"):
        confirm_on_cpu(RuntimeError(AMBIGUOUS), payloads, "DALI on batch 0")
    with pytest.raises(Reroute):  # a status that names the image: rerouted as before
        confirm_on_cpu(RuntimeError("nvImageCodec failure: '#4'"), payloads, "DALI on batch 0")
    with pytest.raises(RuntimeError, match='NVJPEG error "6"'):  # a device status: raised as it was
        confirm_on_cpu(RuntimeError('NVJPEG error "6"'), payloads, "DALI on batch 0")


def test_two_causeless_dali_failures_in_a_row_break_the_lane_and_the_cpu_lane_finishes(photo_root, monkeypatch):
    """Before, every "Failed to decode sample #k" was rerouted: a failing device was handed every
    batch for ever and never broken. Now the lane breaks after two and the stream is complete."""
    import warnings
    from hybridload import HybridLoader, LoaderPolicy
    from hybridload.lanes._gpu.dali import DaliLane

    src, rec = sources.ImageFolder(photo_root), recipe.imagenet_train(32)

    def stream(policy):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with HybridLoader(src, rec, 6, policy=policy, seed=7, return_indices=True, device="cpu") as ld:
                return [(idx.tolist(), lab.tolist()) for _img, lab, idx in ld], ld.stats()

    want, _ = stream(LoaderPolicy(mode="cpu", cpu_actors=0))
    runs = {"n": 0}
    real_init = DaliLane.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        real_run = self._pipe.run

        def run():
            runs["n"] += 1
            if runs["n"] > 2:  # the real DALI (CPU-only) message, on images the CPU decodes
                raise RuntimeError(AMBIGUOUS)
            return real_run()

        self._pipe.run = run

    monkeypatch.setattr(DaliLane, "__init__", init)
    got, stats = stream(LoaderPolicy(mode="gpu", gpu_engine="dali", cpu_actors=0, break_after=2))
    assert got == want  # every batch, in order, once
    assert stats["lanes"]["gpu"]["batches"] == 2  # broken after two faults in a row
    assert runs["n"] <= 2 + 2 + 2  # two good, two faults to break, two in flight
