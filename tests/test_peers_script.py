"""benchmarks/peers.py runs in a reduced form, so that it cannot rot."""

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_peers_script_quick_run_measures_every_contestant(tmp_path, zygote):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = tmp_path / "peers.json"
    # python peers.py as written, in the session's zygote (its torch import done once for the session)
    proc = zygote.run(
        REPO / "benchmarks" / "peers.py",
        args=("--quick", "--root", str(tmp_path / "photos"), "--out", str(out), "--plot", str(tmp_path / "peers.png")),
        cwd=Path.cwd(),
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    results = report["results"]
    for name in (
        "hybridload",
        "hybridload-inprocess",
        "torch-dataloader",
        "dpex-style",
        "ray-data",
        "dali",
        "torch-pil",
    ):
        assert results[name]["median_images_per_s"] > 0, name
    for name in ("torchdata-nodes", "spdl"):  # the 'peers' extra: measured where installed, else named as skipped
        assert results.get(name, {}).get("median_images_per_s", 0) > 0 or name in report["skipped"], name
    assert (tmp_path / "peers.png").stat().st_size > 1000
