"""Each GPU engine against the CPU lane on 4:4:4, 4:2:2, 4:2:0 and greyscale JPEGs: mean, p99
and max |diff| recorded (the docs state the measured figure per subsampling), judged by
``cuda_checks.judge``: only a gross difference (a wrong box, flip or batch) fails."""

from __future__ import annotations

import pytest
import torch

from cuda_checks import cuda_fixture, gpu_photos_fixture  # noqa: F401 (fixtures)
from cuda_checks import NO_CUDA, SUBSAMPLINGS, dali_missing, engine_vs_cpu, judge, spec_gpu_lane, subsampled_folders

from hybridload import recipe, sources

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)]


@pytest.fixture(scope="module")
def folders(gpu_photos, tmp_path_factory):
    return subsampled_folders(gpu_photos, tmp_path_factory.mktemp("subsampled"), 64)


@pytest.mark.parametrize("subsampling", list(SUBSAMPLINGS))
@pytest.mark.parametrize("engine", ["torch", "dali"])
def test_gpu_engine_pixels_stay_within_rounding_of_the_cpu_lane(engine, subsampling, folders, cuda, record_property):
    if engine == "dali" and dali_missing():
        pytest.skip(dali_missing())
    row = engine_vs_cpu(
        lambda s, r, b: spec_gpu_lane(s, r, b, cuda, engine=engine),
        sources.ImageFolder(folders[subsampling]),
        recipe.imagenet_train(224),
        32,
    )
    verdict, fault = judge(row)
    for key in ("engine", "mean", "p99", "max", "pixels"):
        record_property(key, round(row[key], 4) if isinstance(row[key], float) else row[key])
    record_property("verdict", verdict)
    assert not fault, verdict
