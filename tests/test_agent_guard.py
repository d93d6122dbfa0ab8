"""The embedded cluster's guard: once the raylet is gone, Ray's two node agents it noted are
SIGKILLed, and nothing else is (a stand-in raylet with stand-in agents, by their titles)."""

import os
import signal
import subprocess
import sys
import threading
import time

from hybridload.raycluster._agent_guard import guard, is_agent, start_time

#: a stand-in raylet: two children titled as Ray's agents, one that is not, then it dies on a line
#: of stdin (the children orphaned, as a SIGKILLed trainer's raylet leaves them)
RAYLET = """
import os, subprocess, sys
kids = [subprocess.Popen(["bash", "-c", f"exec -a {title} sleep 120"])
        for title in ("ray::DashboardAgent", "ray::RuntimeEnvAgent", "not-an-agent")]
print(" ".join(str(k.pid) for k in kids), flush=True)
sys.stdin.readline()
os._exit(0)
"""


def _gone(pid: int, born: int | None) -> bool:
    return start_time(pid) != born


def test_is_agent_knows_the_agents_by_script_and_by_title_only():
    assert is_agent(["/v/bin/python", "-u", "/v/site-packages/ray/dashboard/agent.py", "--node-id=x"])
    assert is_agent(["/v/bin/python", "-u", "/v/site-packages/ray/_private/runtime_env/agent/main.py"])
    assert is_agent(["ray::DashboardAgent"]) and is_agent(["ray::RuntimeEnvAgent "])
    assert not is_agent(["ray::IDLE"]) and not is_agent(["/v/bin/python", "train.py", "agent.py"]) and not is_agent([])


def test_the_guard_kills_the_agents_once_the_raylet_is_gone_and_nothing_else():
    raylet = subprocess.Popen([sys.executable, "-c", RAYLET], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    kids = [int(p) for p in raylet.stdout.readline().split()]
    born = {k: start_time(k) for k in kids}
    try:
        deadline = time.monotonic() + 10  # the titles are set once bash execs sleep
        while not all(is_agent(open(f"/proc/{k}/cmdline").read().split("\0")) for k in kids[:2]):
            assert time.monotonic() < deadline, "the stand-in agents never took their titles"
            time.sleep(0.05)
        got: list = []
        watcher = threading.Thread(target=lambda: got.append(guard(raylet.pid, poll_s=0.05)))
        watcher.start()
        time.sleep(0.5)
        assert watcher.is_alive() and all(not _gone(k, born[k]) for k in kids)  # nothing while the raylet lives
        raylet.stdin.write("die\n")
        raylet.stdin.flush()
        raylet.wait(timeout=10)
        watcher.join(timeout=10)
        assert not watcher.is_alive(), "the guard did not end after its raylet"
        assert sorted(got[0]) == sorted(kids[:2])
        deadline = time.monotonic() + 5
        while not all(_gone(k, born[k]) for k in kids[:2]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(k, born[k]) for k in kids[:2]), "an agent outlived the guard"
        assert not _gone(kids[2], born[kids[2]]), "the guard signalled a process that is not an agent"
    finally:
        if raylet.poll() is None:
            raylet.kill()
            raylet.wait(timeout=10)
        for k in kids:
            if not _gone(k, born[k]):
                os.kill(k, signal.SIGKILL)
