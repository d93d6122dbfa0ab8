"""A multi-process job (a launcher and the ranks it starts) run as a user runs it, under a deadline."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest


def run_job(argv, *, cwd, env, what, deadline_s, zygote=None):
    """Run ``argv`` in a process group of its own; its output (stdout and stderr), after asserting
    exit status 0. Past ``deadline_s`` the whole group (the launcher and every rank) is killed and
    the test fails with the output. With the session's ``zygote``, ``argv`` is ``[python, script,
    *args]`` and the launcher runs as ``python script`` in a child forked from it (a process group of
    its own too, killed whole on the deadline), skipping its torch import; the ranks it starts are
    fresh interpreters. Its stdout comes before its stderr, not interleaved."""
    if zygote is not None:
        assert argv[0] == sys.executable and str(argv[1]).endswith(".py"), argv
        try:
            ran = zygote.run(Path(argv[1]), args=tuple(argv[2:]), cwd=Path(cwd), env=env, timeout=deadline_s)
        except TimeoutError as exc:
            pytest.fail(f"{what} did not end within {deadline_s} s:\n{str(exc)[-8000:]}")
        out = ran.stdout + ran.stderr
        assert ran.returncode == 0, out[-8000:]
        return out
    proc = subprocess.Popen(
        argv, cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        pytest.fail(f"{what} did not end within {deadline_s} s:\n" + out[-8000:])
    assert proc.returncode == 0, out[-8000:]
    return out
