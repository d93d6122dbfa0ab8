import subprocess
import sys


def test_demo_runs_end_to_end_and_reports_images_per_second(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hybridload.cli", "demo", "--data", str(tmp_path / "d"),
                           "--images", "24", "--batch-size", "8", "--size", "64", "--epochs", "1", "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "epoch 0 images/s" in proc.stdout and "(24 images in" in proc.stdout
    assert "inprocess: 100%" in proc.stdout
