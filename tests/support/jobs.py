"""A multi-process job (a launcher and the ranks it starts) run as a user runs it, under a deadline."""

import os
import signal
import subprocess

import pytest


def run_job(argv, *, cwd, env, what, deadline_s):
    """Run ``argv`` in a process group of its own; its output (stdout and stderr), after asserting
    exit status 0. Past ``deadline_s`` the whole group (the launcher and every rank) is killed and
    the test fails with the output."""
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
