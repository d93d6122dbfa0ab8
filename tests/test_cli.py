import subprocess
import sys


import os
import re


def test_demo_with_ray_runs_ray_and_dali_and_reports_images_per_second(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # the embedded cluster
    proc = subprocess.run([sys.executable, "-m", "hybridload.cli", "demo", "--data", str(tmp_path / "d"),
                           "--images", "48", "--batch-size", "8", "--size", "64", "--epochs", "2", "--quiet",
                           "--ray"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"\| epoch 1 images/s +\| \d+ \(48 images in", proc.stdout), proc.stdout
    assert "Ray lane" in proc.stdout and "DALI CPU-only mode, no GPU visible" in proc.stdout


def test_demo_in_process(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hybridload.cli", "demo", "--data", str(tmp_path / "d"),
                           "--images", "24", "--batch-size", "8", "--size", "64", "--epochs", "1", "--quiet",
                           "--in-process", "--mode", "cpu"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "inprocess: 100%" in proc.stdout and "in-process lane" in proc.stdout
