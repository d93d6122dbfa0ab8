"""A Ray future's callback runs on Ray's own event thread: the pool's callbacks never call
Ray there (a ``ray.kill`` inside one waited for that thread forever, and every later Ray call
of the process with it, signals included). The job runs in a process of its own under a
deadline, so a process that stops does not stop the test session."""

import json
import os
import sys
import textwrap

from support.jobs import run_job

CHILD = textwrap.dedent('''
    import json, threading, time
    import ray
    from hybridload.raycluster import PlacementRules
    from hybridload.lanes._ray import ActorPool, PoolConfig
    from hybridload.lanes._ray.callbacks import in_ray_callback, off_callback_thread, when_done

    class Worker:
        """Actor 0 starts at once; the others fail their start after the pool is running."""
        def __init__(self, index, size):
            self.index = index
        def ready(self):
            if self.index:
                time.sleep(1.0)
                raise ValueError(f"actor {self.index} cannot start")
            return "ready"

    @ray.remote
    def ping():
        return "pong"

    ray.init(address="local", num_cpus=3, include_dashboard=False)
    # the helper itself: inside a callback the call goes to another thread, outside it runs here
    seen = {}
    def record(tag):
        seen[tag] = (threading.current_thread().name, in_ray_callback())
    when_done(ping.remote(), lambda f: off_callback_thread(record, "callback"))
    off_callback_thread(record, "main")
    deadline = time.monotonic() + 30
    while "callback" not in seen and time.monotonic() < deadline:
        time.sleep(0.05)
    print("@SEEN", json.dumps(seen), flush=True)

    class IndexedPool(ActorPool):
        pass_worker_index = True

    pool = IndexedPool(Worker, (), PoolConfig(rules=PlacementRules(placement="any", reserve_local_cpus=0, cpu_actors=3), node_poll_s=60, on_no_actors="raise"))
    deadline = time.monotonic() + 60
    while pool.stats()["failed_starts"] < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    print("@FAILED_STARTS", pool.stats()["failed_starts"], flush=True)
    print("@PING", ray.get(ping.remote(), timeout=30), flush=True)   # Ray still answers this process
    print("@READY", pool.parallelism, flush=True)
    pool.close()
    # the failed actors were killed (by handle, off the callback thread): their CPUs are free again
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU", 0) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    print("@FREE_CPUS", ray.available_resources().get("CPU", 0), flush=True)
    ray.shutdown()
    print("@DONE -", flush=True)
''')


def test_an_actor_start_failing_in_a_callback_leaves_this_process_s_ray_working(tmp_path, zygote):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, RAY_ADDRESS="")
    out = run_job(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        what="the pool with failing starts",
        deadline_s=150,
        zygote=zygote,
    )
    lines = dict(line[1:].split(" ", 1) for line in out.splitlines() if line.startswith("@"))
    seen = json.loads(lines["SEEN"])  # tag -> [thread name, in a callback]
    assert seen["main"] == ["MainThread", False]
    thread, flagged = seen["callback"]
    assert thread != "MainThread" and not flagged  # moved off Ray's thread, where the flag is not set
    assert int(lines["FAILED_STARTS"]) >= 2
    assert lines["PING"] == "pong"
    assert int(lines["READY"]) == 1
    assert float(lines["FREE_CPUS"]) == 3.0
    assert "DONE" in lines
