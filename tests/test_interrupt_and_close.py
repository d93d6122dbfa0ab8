"""Stopping a loader: Ctrl-C while a sample takes a minute, next() after close(), a loader
dropped without close(), threads sharing one iterator, and error messages naming samples."""

import os
import signal
import subprocess
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))

SLOW_SAMPLE = textwrap.dedent("""
    import time
    import numpy as np
    from hybridload import HybridLoader, LoaderPolicy, recipe, sources

    class Slow:
        def __len__(self):
            return 16

        def __getitem__(self, i):
            if i == 9:
                time.sleep(60)  # batch 2 (samples 8..11) takes a minute
            return np.full((40, 40, 3), i, np.uint8), i

    policy = LoaderPolicy(cpu_actors=0, threads=2, local_workers="threads")
    with HybridLoader(sources.TorchDataset(Slow()), recipe.imagenet_eval(32), 4, shuffle=False, policy=policy) as ld:
        for k, _ in enumerate(ld):
            print("GOT", k, flush=True)
""")


def test_ctrl_c_while_a_sample_takes_a_minute_exits_within_seconds():
    proc = subprocess.Popen([sys.executable, "-c", SLOW_SAMPLE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": HERE})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"the loader ended early: {proc.stderr.read()[-2000:]}"
            if line.strip() == "GOT 1":
                break
        time.sleep(1.0)  # the consumer now waits for batch 2, whose sample sleeps
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert "KeyboardInterrupt" in err, err[-2000:]
    assert took < 8, f"the process took {took:.1f} s to exit after Ctrl-C"
