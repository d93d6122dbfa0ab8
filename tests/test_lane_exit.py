"""A loader's processes end cleanly: no lane thread left inside torch at interpreter exit after
close() (issue 35.14), and no worker process outliving a trainer killed abruptly (35.24)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))

BREAK_AFTER_TWO_STEPS = textwrap.dedent("""
    import threading, time
    import numpy as np
    import torch
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources

    class TorchWork:
        # each sample runs 0.25 s of torch ops (C++, the GIL released), as a large image's decode and resize
        def __len__(self):
            return 256

        def __getitem__(self, i):
            a, t0 = torch.ones(200, 200), time.perf_counter()
            while time.perf_counter() - t0 < 0.25:
                a = (a @ a).clamp_(0, 1)
            return np.full((40, 40, 3), i % 256, np.uint8), i

    policy = LoaderPolicy(local_workers="threads", threads=1, cpu_actors=0)
    with HybridLoader(sources.TorchDataset(TorchWork()), recipe.imagenet_eval(32), 12, shuffle=False,
                      device="cpu", policy=policy) as loader:  # a batch: 3 s of torch, longer than close() waits
        for step, _ in enumerate(loader):
            if step == 1:
                break
    print("LEFT", [t.name for t in threading.enumerate() if t.name.startswith("hybridload")], flush=True)
""")


def test_close_leaves_no_lane_thread_and_the_process_exits_0():
    """5 runs at once of the user's `with HybridLoader(...threads=1) as loader:` + `break`: each
    exits 0 with no lane thread left (before: rc 134, 'terminate called without an active exception')."""
    procs = [subprocess.Popen([sys.executable, "-c", BREAK_AFTER_TWO_STEPS], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": HERE})
             for _ in range(5)]
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=180)
            outs.append((p.returncode, out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    for rc, out in outs:
        assert rc == 0 and "LEFT []" in out, f"rc {rc}:\n{out[-3000:]}"
