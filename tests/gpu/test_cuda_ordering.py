"""The torch engine's batches do not change when its stream is stalled (the lane as the loader
builds it: no host wait per batch); the control without the wait before each decode says
whether the hazard shows on this GPU (``cuda_checks.stalled_ordering``)."""

from __future__ import annotations

import pytest
import torch

from cuda_checks import cuda_fixture, gpu_photos_fixture, rec224_fixture  # noqa: F401 (fixtures)
from cuda_checks import NO_CUDA, cuda_stall, spec_gpu_lane, stalled_ordering

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)]


def test_a_stalled_stream_changes_no_batch(gpu_photos, rec224, cuda, record_property):
    got = stalled_ordering(
        lambda: spec_gpu_lane(gpu_photos, rec224, 32, cuda),
        len(gpu_photos),
        32,
        stall=cuda_stall,
        sync=lambda lane: torch.cuda.synchronize(cuda),
    )
    record_property("equal_batches", f"{got['equal_batches']}/{got['batches']}")
    record_property("control_without_the_wait", got["control"])
    assert not got["differing_batches"], f"batches {got['differing_batches']} changed under a stalled stream"
