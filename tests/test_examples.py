"""The Dpex-style examples run to completion (a few steps each) against the test cluster."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.streams import free_port

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


#: ``python -m torch.distributed.run`` as ``-c`` code: the launcher in the zygote skips torch's import;
#: the ranks it starts are fresh interpreters, as under torchrun
TORCHRUN = "import runpy; runpy.run_module('torch.distributed.run', run_name='__main__', alter_sys=True)"


def _run(args, env_extra, timeout=300, zygote=None):
    env = dict(os.environ, **env_extra)
    if zygote is not None and args[1:3] == ["-m", "torch.distributed.run"]:
        proc = zygote.run(code=TORCHRUN, args=tuple(args[3:]), cwd=EXAMPLES, env=env, timeout=timeout)
    elif zygote is not None:  # args: [sys.executable, "example.py", *its arguments]
        assert args[0] == sys.executable and args[1].endswith(".py"), args
        proc = zygote.run(EXAMPLES / args[1], args=tuple(args[2:]), cwd=EXAMPLES, env=env, timeout=timeout)
    else:
        proc = subprocess.run(args, cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stderr + proc.stdout


@pytest.mark.parametrize("script", ["dpex_single.py", "dpex_dataparallel.py"])
def test_single_process_examples_train_a_few_steps(ray_cluster, script, zygote):
    out = _run([sys.executable, script, "--steps", "3"], {"RAY_ADDRESS": ray_cluster[0].address}, zygote=zygote)
    assert "step 3 loss" in out


def test_ddp_example_runs_under_torchrun(ray_cluster, zygote):
    port = free_port()
    out = _run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(port),
            "dpex_ddp.py",
            "--steps",
            "2",
            "--epochs",
            "1",
        ],
        {"RAY_ADDRESS": ray_cluster[0].address},
        zygote=zygote,
    )
    assert "epoch 0 step 2 loss" in out


# ----------------------------------------------------------------------------- HybridLoader examples


def _torchrun(script, *args):
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        script,
        *args,
    ]


@pytest.mark.parametrize("script", ["single_gpu.py", "dataparallel.py"])
def test_hybridloader_single_process_examples_train_a_few_steps_per_epoch(photo_root, script, zygote):
    out = _run([sys.executable, script, "--data", photo_root, "--steps", "2", "--epochs", "2"], {}, zygote=zygote)
    assert "epoch 0 step 2 loss" in out and "epoch 1 step 2 loss" in out
    assert "epoch 1 step 3 loss" not in out


def test_single_gpu_example_with_ray_runs_on_ray_actors(ray_cluster, photo_root, zygote):
    out = _run(
        [sys.executable, "single_gpu.py", "--data", photo_root, "--steps", "2", "--ray"],
        {"RAY_ADDRESS": ray_cluster[0].address},
        zygote=zygote,
    )
    assert "epoch 0 step 2 loss" in out
    assert "(per lane: {'ray'" in out
    assert re.search(r"(\d+) batches delivered to the loop; the lanes made (\d+) images", out)  # not "loaded"


def test_ddp_torchrun_example_saves_the_loader_state_and_resumes_from_it(photo_root, tmp_path, zygote):
    import json

    ckpt = tmp_path / "ckpt"
    _run(
        _torchrun("ddp_torchrun.py", "--data", photo_root, "--steps", "1", "--epochs", "1", "--checkpoint", str(ckpt)),
        {},
        zygote=zygote,
    )
    states = [json.loads((ckpt / f"loader-rank{r}.json").read_text()) for r in range(2)]
    assert [(s["rank"], s["world_size"], s["epoch"], s["position"]) for s in states] == [(0, 2, 0, 1), (1, 2, 0, 1)]
    out = _run(
        _torchrun(
            "ddp_torchrun.py",
            "--data",
            photo_root,
            "--steps",
            "2",
            "--epochs",
            "2",
            "--checkpoint",
            str(ckpt),
            "--resume",
        ),
        {},
        zygote=zygote,
    )
    assert "resumed at epoch 0, batch 1 of 2" in out
    assert "epoch 0 step 1 loss" in out and "epoch 0 step 2 loss" not in out  # only the batch not yet seen
    assert "epoch 1 step 2 loss" in out and out.count("lanes used: ['inprocess']") == 2
    assert json.loads((ckpt / "loader-rank1.json").read_text())["epoch"] == 1


def test_ddp_torchrun_example_with_ray_shares_one_cluster(ray_cluster, photo_root, tmp_path, zygote):
    out = _run(
        _torchrun(
            "ddp_torchrun.py",
            "--data",
            photo_root,
            "--steps",
            "2",
            "--epochs",
            "1",
            "--ray",
            "--checkpoint",
            str(tmp_path),
        ),
        {"RAY_ADDRESS": ray_cluster[0].address},
        zygote=zygote,
    )
    assert "epoch 0 step 2 loss" in out
    assert out.count("lanes used: ['ray']") == 2


def test_cifar_ddp_example_trains_and_evaluates_under_torchrun(tmp_path, zygote):
    # TMPDIR: the generated 32x32 dataset goes under this test's temporary directory
    out = _run(_torchrun("cifar_ddp.py", "--steps", "2", "--epochs", "1"), {"TMPDIR": str(tmp_path)}, zygote=zygote)
    assert "epoch 0 step 2 loss" in out
    assert "epoch 0 test accuracy" in out and "over 100 images" in out
    assert len(list((tmp_path / "hybridload-examples-cifar" / "train").glob("*/*.png"))) == 400


def test_gpu_lane_example_runs_here_and_says_what_ran_on_the_gpu_lane(photo_root, zygote):
    out = _run(
        [sys.executable, "gpu_lane.py", "--data", photo_root, "--steps", "2", "--epochs", "1"], {}, zygote=zygote
    )
    assert "epoch 0 step 2 loss" in out
    # no CUDA here: DALI's CPU-only stand-in where DALI imports (said loudly), else the CPU lane with a warning
    assert "CPU-only mode (no GPU visible)" in out or "no GPU lane" in out
