"""CustomStage: the user's function over one decoded image with a keyed generator; CPU lanes
only (the GPU lane off with one warning); the function must travel to workers."""

import logging
import threading

import numpy as np
import pytest

from hybridload import HybridLoader, LoaderPolicy, recipe, sources
from hybridload.recipe._custom import CustomOp, custom_generator
from hybridload.errors import SampleError
from hybridload._kernels import process_sample
from hybridload.lanes import _once as once
from hybridload._policy.decode import decode_lanes

from support.streams import local_lane_streams, stream


def noise(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Adds keyed noise: different draws show up in the pixels."""
    return np.clip(image.astype(np.int16) + rng.integers(-40, 41, size=image.shape), 0, 255).astype(np.uint8)


def as_float(image, rng):
    return image.astype(np.float32)


REC = recipe.Recipe([recipe.Decode(), recipe.RandomResizedCrop(32), recipe.CustomStage(noise), recipe.HorizontalFlip()])
FIXED = recipe.Recipe([recipe.Decode(), recipe.Resize((32, 32)), recipe.CustomStage(noise)])  # only the stage draws


def pixels(src, rec, index, epoch, seed=3):
    return process_sample(src, rec, index, seed, epoch)[0].numpy()


def test_the_stage_gets_the_decoded_image_and_its_keyed_generator(photo_root):
    src = sources.ImageFolder(photo_root)
    plain = recipe.Recipe([recipe.Decode(), recipe.Resize((32, 32))])
    base = pixels(src, plain, 4, epoch=2).transpose(1, 2, 0)  # HWC, as the function sees it
    want = noise(base.copy(), custom_generator(3, 2, 4, 2))  # stage position 2 in FIXED
    assert np.array_equal(pixels(src, FIXED, 4, epoch=2).transpose(1, 2, 0), want)


def test_same_key_same_output_and_another_epoch_or_index_draws_differently(photo_root):
    src = sources.ImageFolder(photo_root)
    a = pixels(src, FIXED, 4, epoch=0)
    assert np.array_equal(a, pixels(src, FIXED, 4, epoch=0))
    assert not np.array_equal(a, pixels(src, FIXED, 4, epoch=1))
    assert not np.array_equal(a, pixels(src, FIXED, 4, epoch=0, seed=4))
    g = [custom_generator(0, 0, i, 2).integers(0, 2**62) for i in range(50)]
    assert len(set(g)) == 50


def test_the_stage_leaves_the_other_stages_draws_unchanged():
    without = recipe.Recipe([recipe.Decode(), recipe.RandomResizedCrop(32), recipe.HorizontalFlip()])
    for i in range(40):
        ops = REC.sample_params(0, 1, i, 120, 90).ops
        assert tuple(op for op in ops if not isinstance(op, CustomOp)) == without.sample_params(0, 1, i, 120, 90).ops


def test_process_lane_is_bit_identical_to_the_in_process_lane(photo_root):
    runs, lanes = local_lane_streams(sources.ImageFolder(photo_root), REC, 7, seed=5, epochs=(0, 1), threads=2)
    assert {w: d.startswith("process lane") for w, d in lanes.items()} == {"threads": False, "processes": True}
    assert runs["processes"] == runs["threads"] and len(runs["threads"]) == 18


def test_ray_lane_is_bit_identical_to_the_in_process_lane(photo_root):
    import support.ray_fixtures  # noqa: F401  (loopback only; workers can import this test module)

    src = sources.ImageFolder(photo_root)
    with HybridLoader(
        src, REC, 7, policy=LoaderPolicy(cpu_actors=0, threads=2), seed=5, return_indices=True, device="cpu"
    ) as ld:
        local = stream(ld, epochs=(0,))
    with HybridLoader(
        src,
        REC,
        7,
        policy=LoaderPolicy(ray_address="embedded", cpu_actors=2, reserve_local_cpus=0, batch_timeout_s=120),
        seed=5,
        return_indices=True,
        device="cpu",
    ) as ld:
        import ray

        remote = stream(ld, epochs=(0,))
        assert all(n["NodeManagerAddress"] == "127.0.0.1" for n in ray.nodes() if n["Alive"]), "Ray left loopback"
        assert ld.stats()["lanes"]["ray"]["images"] == 60  # every sample ran on the actors
    assert remote == local


@pytest.mark.parametrize("mode", ["gpu", "split", "auto"])
def test_the_decoding_turns_the_gpu_lane_off_for_a_recipe_with_a_custom_stage(mode):
    policy = LoaderPolicy(mode=mode, gpu_share=0.5 if mode == "split" else None, cpu_actors=0)
    spec = decode_lanes(policy, recipe=REC, device="cuda:0")
    assert not spec.gpu and not spec.auto and not spec.cpu_standby and len(spec.notes) == 1
    assert "GPU lane is disabled" in spec.notes[0] and "CustomStage(noise)" in spec.notes[0]
    assert decode_lanes(policy, recipe=recipe.imagenet_train(32), device="cuda:0").gpu  # without it, the GPU lane stays
    assert not decode_lanes(LoaderPolicy(mode="cpu", cpu_actors=0), recipe=REC).notes


@pytest.mark.parametrize(
    "policy,cpus,ships",
    [
        (LoaderPolicy(cpu_actors=0, local_workers="threads"), 2, None),
        (LoaderPolicy(local_workers="processes", start_method="fork"), 2, None),  # forked: nothing is pickled
        (LoaderPolicy(local_workers="processes", start_method="forkserver"), 2, ("pickle", "worker processes")),
        (LoaderPolicy(local_workers="auto", start_method="spawn"), 16, ("pickle", "worker processes")),
        (LoaderPolicy(ray_address="embedded"), 2, ("cloudpickle", "Ray actors")),
        (LoaderPolicy(mode="gpu", local_workers="processes", start_method="spawn"), 2, None),  # stand-by: threads
    ],
    ids=["threads", "fork", "forkserver", "auto-many-cpus-spawn", "ray", "gpu-standby"],
)
def test_the_lane_spec_says_how_the_recipe_travels_to_the_workers(policy, cpus, ships):
    assert decode_lanes(policy, cpus=cpus).ships_recipe == ships


def test_gpu_mode_runs_on_the_cpu_lane_with_one_warning(photo_root, caplog, monkeypatch):
    monkeypatch.setattr(once, "_said", set())  # as in a fresh process: the note comes once
    src = sources.ImageFolder(photo_root)
    with caplog.at_level(logging.WARNING, logger="hybridload"):
        with HybridLoader(
            src,
            REC,
            7,
            policy=LoaderPolicy(mode="gpu", cpu_actors=0, threads=2),
            seed=5,
            return_indices=True,
            device="cpu",
        ) as ld:
            got = stream(ld, epochs=(0, 1))
            described = ld.describe_lanes()
    warned = [r for r in caplog.records if "GPU lane is disabled" in r.getMessage()]
    assert len(warned) == 1 and "CustomStage(noise)" in warned[0].getMessage()
    assert "DALI" not in described
    with HybridLoader(
        src, REC, 7, policy=LoaderPolicy(mode="cpu", cpu_actors=0, threads=2), seed=5, return_indices=True, device="cpu"
    ) as ld:
        assert stream(ld, epochs=(0, 1)) == got


def test_a_lambda_is_refused_for_worker_processes_that_import_it_naming_it(photo_root):
    rec = recipe.Recipe([recipe.Decode(), recipe.Resize((32, 32)), recipe.CustomStage(lambda im, rng: im)])
    src = sources.ImageFolder(photo_root)
    with pytest.raises(ValueError, match=r"<lambda> cannot be sent to worker processes .*define it at module level"):
        HybridLoader(
            src,
            rec,
            7,
            policy=LoaderPolicy(threads=2, local_workers="processes", start_method="forkserver"),
            device="cpu",
        )
    for workers in ("threads", "processes"):  # in this process, or in forked ones, it runs
        with HybridLoader(
            src, rec, 7, policy=LoaderPolicy(threads=2, local_workers=workers, start_method="fork"), device="cpu"
        ) as ld:
            assert next(iter(ld))[0].shape == (7, 3, 32, 32)


def test_a_function_that_cannot_travel_to_ray_actors_is_refused_naming_it(photo_root):
    lock = threading.Lock()

    def locked(image, rng):
        with lock:
            return image

    rec = recipe.Recipe([recipe.Decode(), recipe.Resize((32, 32)), recipe.CustomStage(locked)])
    with pytest.raises(ValueError, match=r"locked cannot be sent to Ray actors .*lock.*define it at module level"):
        HybridLoader(sources.ImageFolder(photo_root), rec, 7, policy=LoaderPolicy(ray_address="embedded"), device="cpu")


def test_a_bad_return_names_the_sample_and_the_stage(photo_root):
    rec = recipe.Recipe([recipe.Decode(), recipe.Resize((32, 32)), recipe.CustomStage(as_float)])
    with pytest.raises(SampleError, match=r"CustomStage\(as_float\).*float32 array.*HWC uint8") as info:
        process_sample(sources.ImageFolder(photo_root), rec, 2, 0, 0)
    assert info.value.index == 2 and info.value.stage == "CustomStage(as_float)"


@pytest.mark.parametrize(
    "make,msg",
    [
        (lambda: recipe.CustomStage(3), "fn must be a function"),
        (lambda: recipe.CustomStage(noise, name=5), "name must be a str"),
        (
            lambda: recipe.Recipe(
                [recipe.Decode(), recipe.Resize((8, 8)), recipe.Normalize(), recipe.CustomStage(noise)]
            ),
            "CustomStage at position 3 comes after Normalize",
        ),
    ],
)
def test_bad_custom_stages_get_a_clear_error(make, msg):
    with pytest.raises((TypeError, ValueError), match=msg):
        make()


@pytest.mark.parametrize("engine", ["dali", "torch"])
def test_no_gpu_engine_builds_for_a_recipe_with_a_custom_stage(photo_root, engine):
    """The planner's rate probe goes through build_engine too: it must not measure a chain that skips the stage."""
    import torch

    from hybridload.errors import LaneUnavailableError
    from hybridload.lanes._gpu import build_engine

    with pytest.raises(LaneUnavailableError, match="CustomStage"):
        build_engine(
            engine,
            LoaderPolicy().lane_spec(),
            sources.ImageFolder(photo_root),
            REC,
            batch_size=4,
            device=torch.device("cpu"),
        )


def test_a_custom_stage_may_sit_among_geometric_or_photometric_stages_but_not_after_normalize():
    recipe.Recipe([recipe.Decode(), recipe.RandomResizedCrop(32), recipe.CustomStage(noise), recipe.HorizontalFlip()])
    recipe.Recipe([recipe.Decode(), recipe.RandomResizedCrop(32), recipe.ColorJitter(0.4), recipe.CustomStage(noise)])
    with pytest.raises(ValueError, match="CustomStage at position 3 comes after Normalize"):
        recipe.Recipe([recipe.Decode(), recipe.RandomResizedCrop(32), recipe.Normalize(), recipe.CustomStage(noise)])
