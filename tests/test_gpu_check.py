"""benchmarks/gpu_check.py runs as a CPU smoke test, so the GPU check cannot rot between GPU runs."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"


def test_gpu_check_quick_on_cpu_writes_every_section(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report) == {"environment", "correctness", "speed", "nvml", "plan", "local_sweep"}
    px = report["correctness"]["pixels"]
    assert px["mean_abs_diff_max"] <= 0.5 and px["share_off_by_more_than_2_max"] < 0.01
    assert report["correctness"]["index_streams_identical"] is True
    for mode in ("ceiling_synthetic", "hybridload_gpu", "hybridload_cpu", "torch_dataloader",
                 "hybridload_split_at_plan"):
        assert report["speed"][mode] > 0
    assert 0 <= report["plan"]["planned_share"] <= 1 and set(report["local_sweep"]) == {"1", "2"}
    assert "| pixels vs CPU lane" in proc.stdout
