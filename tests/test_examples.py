"""The Dpex-style examples run to completion (a few steps each) against the test cluster."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(args, env_extra, timeout=300):
    env = dict(os.environ, **env_extra)
    proc = subprocess.run(args, cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stderr + proc.stdout


@pytest.mark.parametrize("script", ["dpex_single.py", "dpex_dataparallel.py"])
def test_single_process_examples_train_a_few_steps(ray_cluster, script):
    out = _run([sys.executable, script, "--steps", "3"], {"RAY_ADDRESS": ray_cluster[0].address})
    assert "step 3 loss" in out


def test_ddp_example_runs_under_torchrun(ray_cluster):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = _run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                "127.0.0.1", "--master_port", str(port), "dpex_ddp.py", "--steps", "2", "--epochs", "2"],
               {"RAY_ADDRESS": ray_cluster[0].address})
    assert "epoch 1 step 2 loss" in out
